package partition

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/notify"
	"slices"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/internal/pgxwork"
)

// Work is n new work items for the partition Key (of the Store's kind).
type Work struct {
	Key string // the partition (created if new)
	N   int64  // items added; at least 0
}

// Range is the numbers a producer's work items on one partition took:
// First … Last, inclusive (empty, First = Last+1, when no items were
// added). They follow the partition's earlier items without a gap.
type Range struct {
	Key         string // the partition
	First, Last int64  // the items' numbers, 1-based
}

// N is the number of items in r.
func (r Range) N() int64 { return r.Last - r.First + 1 }

// AddWork is AddWorkTx in a transaction of its own.
func (s *Store) AddWork(ctx context.Context, key string, n int64) (Range, error) {
	return inTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) (Range, error) { return s.AddWorkTx(ctx, tx, key, n) })
}

// AddWorks is AddWorksTx in a transaction of its own.
func (s *Store) AddWorks(ctx context.Context, work []Work) ([]Range, error) {
	return inTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) ([]Range, error) { return s.AddWorksTx(ctx, tx, work) })
}

// AddWorkTx makes n more work items available on partition key of s's kind,
// creating the partition if it does not exist, inside tx: the caller's own
// transaction, so the work becomes visible (and claimable) atomically with
// the caller's writes, and the wake-up notification of the kind's workers
// is delivered when tx commits (none if it rolls back). It returns the
// numbers the items took, which the producer then writes them under, in
// the same transaction:
//
//	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
//		r, err := orders.AddWorkTx(ctx, tx, customer, int64(len(items)))
//		if err != nil {
//			return err
//		}
//		for i, item := range items {
//			// ... INSERT item with seq r.First+i ...
//		}
//		return nil
//	})
//
// The numbering is safe under concurrency: the statement that raises
// available locks the task row until tx ends, so a concurrent producer of
// the same partition waits and then numbers its items after these (at
// READ COMMITTED; at REPEATABLE READ or SERIALIZABLE it fails with a
// serialization error instead, to be retried). If tx rolls back, the
// numbers are not used and the next producer takes them. Reading the
// highest stored number instead, as in SELECT max(seq), is not safe: two
// producers can read the same value.
//
// The kind decides which processor the work is for: only a distributor of
// the same kind (Config.Kind) claims it. A partition of the same key under
// another kind is another partition, and is left alone. AddWorkTx is
// AddWorksTx with one partition.
func (s *Store) AddWorkTx(ctx context.Context, tx bun.Tx, key string, n int64) (Range, error) {
	rs, err := s.AddWorksTx(ctx, tx, []Work{{Key: key, N: n}})
	if err != nil {
		return Range{}, err
	}
	return rs[0], nil
}

// AddWorksTx is AddWorkTx for several partitions of s's kind in one
// statement, returning the range each partition's items took, one per
// distinct key in byte order (work for the same key more than once is
// added, and numbered, as one). It follows the protocol's lock order: rows are locked in
// partition_key order (so it cannot deadlock with heartbeats, claims,
// releases or other producers; a transaction that adds work to several
// kinds adds it in kind order, byte order, too),
// and only FOR NO KEY UPDATE, which does not wait for batches in flight and
// never changes ownership, so a producer cannot break the checkpoint
// invariant (see the safety argument in docs/protocol.md).
//
// A producer must:
//   - write the items themselves in the same transaction, under the
//     numbers returned (the processor reads items after its checkpoint
//     position, up to available);
//   - keep the transaction short: the row stays locked until it ends, and
//     a batch recording its checkpoint on that partition waits for it
//     (heartbeats skip the row rather than wait);
//   - never change a task row in any other way (version, owner, position,
//     checkpoint, leases), nor lower available, nor lock task rows FOR
//     UPDATE: those are the protocol's.
func (s *Store) AddWorksTx(ctx context.Context, tx bun.Tx, work []Work) ([]Range, error) {
	keys, ns, err := s.mergeWork(work)
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, s.addWorkSQL("?", "?", "?", "?", "?"),
		s.kind, pgdialect.Array(keys), pgdialect.Array(ns), notify.Channel, notify.Payload(notify.Work, s.kind))
	if err != nil {
		return nil, fmt.Errorf("adding work to %d partition(s) of kind %s: %w", len(keys), s.kind, err)
	}
	defer rows.Close()
	ranges := make([]Range, 0, len(keys))
	for rows.Next() {
		var r Range
		if err := rows.Scan(&r.Key, &r.Last); err != nil {
			return nil, fmt.Errorf("adding work to %d partition(s) of kind %s: %w", len(keys), s.kind, err)
		}
		ranges = append(ranges, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("adding work to %d partition(s) of kind %s: %w", len(keys), s.kind, err)
	}
	if len(ranges) != len(keys) {
		return nil, fmt.Errorf("adding work to %d partition(s) of kind %s: %d rows returned", len(keys), s.kind, len(ranges))
	}
	slices.SortFunc(ranges, func(a, b Range) int { return cmp.Compare(a.Key, b.Key) })
	for i := range ranges {
		if ranges[i].Key != keys[i] {
			return nil, fmt.Errorf("adding work to %d partition(s) of kind %s: row for %q returned for %q", len(keys), s.kind, ranges[i].Key, keys[i])
		}
		ranges[i].First = ranges[i].Last - ns[i] + 1
	}
	return ranges, nil
}

// addWorksPgx is AddWorksTx for a transaction on a pgx connection rather
// than database/sql (the loader's, which streams records with COPY;
// internal/pgxwork). The statement, lock order and notification are
// AddWorksTx's own; the same rules bind the producer.
func (s *Store) addWorksPgx(ctx context.Context, tx pgxwork.Tx, work []Work) error {
	keys, ns, err := s.mergeWork(work)
	if err != nil || len(keys) == 0 {
		return err
	}
	if _, err := tx.Exec(ctx, s.addWorkSQL("$1", "$2", "$3", "$4", "$5"),
		s.kind, keys, ns, notify.Channel, notify.Payload(notify.Work, s.kind)); err != nil {
		return fmt.Errorf("adding work to %d partition(s) of kind %s: %w", len(keys), s.kind, err)
	}
	return nil
}

// mergeWork validates work (and s's kind) and returns it as parallel
// arrays, one entry per key (a statement cannot update a row twice), in
// byte order: the key collation is "C", so that is the index's order
// within the kind, the order every multi-row locker of task rows follows.
func (s *Store) mergeWork(work []Work) (keys []string, ns []int64, err error) {
	if err := ValidateKind(s.kind); err != nil {
		return nil, nil, fmt.Errorf("adding work: %w", err)
	}
	sorted := slices.Clone(work)
	slices.SortFunc(sorted, func(a, b Work) int { return cmp.Compare(a.Key, b.Key) })
	keys = make([]string, 0, len(sorted))
	ns = make([]int64, 0, len(sorted))
	for _, w := range sorted {
		switch {
		case w.Key == "":
			return nil, nil, errors.New("adding work: empty partition key")
		case w.N < 0:
			return nil, nil, fmt.Errorf("adding work to %s: %d items: work cannot be taken back", w.Key, w.N)
		case isSegmentKey(w.Key):
			return nil, nil, fmt.Errorf("adding work to %s: the key names a segment (partition key, \"#\" and 19 digits), whose items are fixed when it is split off", w.Key)
		case len(keys) > 0 && keys[len(keys)-1] == w.Key:
			ns[len(ns)-1] += w.N
			continue
		}
		keys, ns = append(keys, w.Key), append(ns, w.N)
	}
	return keys, ns, nil
}

// addWorkSQL is the producer's statement with the given placeholders for
// the kind, the keys, the counts, the notification channel and its
// payload. ORDER BY makes the insert (and its row locks) follow the key
// order. It returns each key with its available after the addition.
func (s *Store) addWorkSQL(kind, keys, ns, channel, payload string) string {
	return s.sql(`
		WITH a AS (
			INSERT INTO {{.Schema}}.tasks AS t (kind, partition_key, available)
			SELECT ` + kind + `::text, key, n FROM unnest(` + keys + `::text[], ` + ns + `::bigint[]) AS w(key, n)
			ORDER BY key COLLATE "C"
			ON CONFLICT (kind, partition_key) DO UPDATE
			SET available = t.available + EXCLUDED.available, updated_at = now()
			RETURNING t.partition_key, t.available
		), n AS (
			SELECT pg_notify(` + channel + `, ` + payload + ` || ' ' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
			FROM (SELECT 1 FROM a LIMIT 1) x
		)
		SELECT partition_key, available FROM a WHERE (SELECT count(*) FROM n) >= 0`)
}
