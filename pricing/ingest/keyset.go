package ingest

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"slices"
)

// keySet finds, exactly and within a fixed memory, the records that share
// their key (recordKey: the contract and the record id, hashed to 64 bits)
// with another record of the same contract: a row of the file with an
// earlier row, or with a stored record. Each record is added as a
// keyEntry. While the entries fit in memory they are kept there; past
// that, they are written to a temporary file in buckets chosen by the
// key's high bits, as many buckets as make one fit in memory (from the
// share of the file read so far). At the end each bucket is read back
// alone and its entries grouped by key with a counting sort on the next
// bits of the key, so that entries with equal keys meet: the cost is
// linear in the number of entries, and a bucket larger than expected is
// split again by the following bits before it is read. Two entries of a
// contract with the same key are the same record id but for a 64-bit
// collision, which the exact check in SQL after this one tells apart.
type keySet struct {
	resident int   // most entries held in memory at once
	writeMem int64 // memory for the write buffers of the buckets
	mem      []keyEntry
	file     *os.File // the buckets, once the entries do not fit in memory
	end      int64    // bytes written to file
	bits     int      // the buckets are chosen by this many high bits of the key
	buckets  []keyBucket
	// estimate gives the number of entries expected in all, from the n
	// added so far: it sizes the buckets.
	estimate func(n int64) int64
	noFile   bool // tests: the temporary file cannot be made
	// seen has a bit for each value of the key's high bits, set once a
	// file row with such a key is added (mayRepeat).
	seen      []uint64
	seenShift uint
	held      int64 // bytes held now, and at most
	peak      int64
	err       error // sticky
}

// keyEntry is one record's key and where the record is: its rank among its
// contract's records in the file (from 0), or storedPos for a record
// stored by an earlier load.
type keyEntry struct {
	key      uint64
	contract uint32 // the streamer's contract index
	pos      uint32
}

const storedPos = math.MaxUint32

func (e keyEntry) stored() bool { return e.pos == storedPos }

const keyEntrySize = 16 // bytes, in memory and in the file

// residentBytesPerKey is the memory of an entry read back to be grouped:
// itself, its place in the grouped copy, and its share of the group counts.
const residentBytesPerKey = 2*keyEntrySize + 4

// minKeyBlock is the least write buffer of a bucket, in bytes.
const minKeyBlock = 1 << 10

// keyReadBuf is the most buffer the buckets are read back through, in
// bytes (a sixteenth of the budget below 1 MiB).
const keyReadBuf = 64 << 10

// errKeySetFull is returned when a bucket cannot be split any further (its
// entries all have the same key) and does not fit in memory.
var errKeySetFull = errors.New("too many records share one key for the memory budget")

// keyBucket is a bucket's entries: blocks written, and its write buffer.
type keyBucket struct {
	buf    []byte
	blocks []keyBlock
	n      int64 // entries, written or not
	used   int   // high bits of the key that are the same for all its entries
}

type keyBlock struct {
	off  int64
	size int // bytes
}

// newKeySet makes a set whose grouping and bitmap of file rows' keys
// (seen: a 32nd, rounded down to a power of two) take at most half of
// budget, its write buffers a quarter, and its read buffer a sixteenth
// (for a budget of at least 16 KiB): 13/16 at most in all, and less than
// half while the file is read.
func newKeySet(budget int64, estimate func(n int64) int64) *keySet {
	seenBytes := int64(1) << (bits.Len64(uint64(max(64, budget/32))) - 1)
	s := &keySet{resident: int(max(64, (budget/2-seenBytes)/residentBytesPerKey)), writeMem: budget / 4, estimate: estimate,
		seen: make([]uint64, seenBytes/8), seenShift: uint(64 - bits.Len64(uint64(seenBytes*8)-1))}
	s.hold(seenBytes)
	return s
}

// mayRepeat is false if no file row added has key k (exactly: its high
// bits are those of no file row's key), so that a stored record with
// that key cannot be a repeat and need not be added. With f file rows and
// b bits, a stored key not in the file passes with a chance of about f/b.
func (s *keySet) mayRepeat(k uint64) bool {
	i := k >> s.seenShift
	return s.seen[i>>6]&(1<<(i&63)) != 0
}

func (s *keySet) hold(n int64) {
	s.held += n
	s.peak = max(s.peak, s.held)
}

// add adds an entry.
func (s *keySet) add(e keyEntry) {
	if !e.stored() {
		i := e.key >> s.seenShift
		s.seen[i>>6] |= 1 << (i & 63)
	}
	if s.err != nil {
		return
	}
	if s.file == nil {
		if len(s.mem) < s.resident {
			if len(s.mem) == cap(s.mem) {
				grown := make([]keyEntry, len(s.mem), min(max(1024, 2*cap(s.mem)), s.resident))
				copy(grown, s.mem)
				s.hold(int64(cap(grown)-cap(s.mem)) * keyEntrySize)
				s.mem = grown
			}
			s.mem = append(s.mem, e)
			return
		}
		if s.spill(); s.err != nil {
			return
		}
	}
	s.put(&s.buckets[e.key>>(64-s.bits)], e)
}

// put appends e to bucket b, writing the buffer out when it is full.
func (s *keySet) put(b *keyBucket, e keyEntry) {
	b.buf = binary.LittleEndian.AppendUint64(b.buf, e.key)
	b.buf = binary.LittleEndian.AppendUint32(b.buf, e.contract)
	b.buf = binary.LittleEndian.AppendUint32(b.buf, e.pos)
	b.n++
	if len(b.buf) == cap(b.buf) {
		s.writeBlock(b)
	}
}

func (s *keySet) writeBlock(b *keyBucket) {
	if len(b.buf) == 0 || s.err != nil {
		return
	}
	if _, err := s.file.WriteAt(b.buf, s.end); err != nil {
		s.err = fmt.Errorf("writing record keys to a temporary file: %w", err)
		return
	}
	b.blocks = append(b.blocks, keyBlock{s.end, len(b.buf)})
	s.end += int64(len(b.buf))
	b.buf = b.buf[:0]
}

// newBuckets makes 2^k buckets below a bucket whose used high bits are the
// same, with write buffers that share writeMem.
func (s *keySet) newBuckets(k, used int) []keyBucket {
	size := max(minKeyBlock, s.writeMem>>k) / keyEntrySize * keyEntrySize
	bs := make([]keyBucket, 1<<k)
	for i := range bs {
		bs[i] = keyBucket{buf: make([]byte, 0, size), used: used + k}
	}
	s.hold(size << k)
	return bs
}

// bucketBits is how many more bits of the key split n entries into
// buckets that fit in memory, with room to spare, as far as the write
// buffers' memory and the key's bits allow.
func (s *keySet) bucketBits(n int64, used int) int {
	want := (n + int64(s.resident)*3/4 - 1) / (int64(s.resident) * 3 / 4)
	k := max(1, bits.Len64(uint64(want-1)))
	room := bits.Len64(uint64(max(2, s.writeMem/minKeyBlock))) - 1
	return min(k, max(1, room), 64-used)
}

// spill moves the entries held in memory to buckets in a temporary file,
// removed from its folder at once (nothing is left behind by a crash).
func (s *keySet) spill() {
	f, err := unlinkedTemp("baton-load-*.keys", s.noFile)
	if err != nil {
		s.err = fmt.Errorf("no temporary file for the record keys: %w", err)
		return
	}
	s.file = f
	s.bits = s.bucketBits(s.estimate(int64(len(s.mem))), 0)
	s.buckets = s.newBuckets(s.bits, 0)
	for _, e := range s.mem {
		s.put(&s.buckets[e.key>>(64-s.bits)], e)
	}
	s.hold(-int64(cap(s.mem)) * keyEntrySize)
	s.mem = nil
}

// close closes (and so deletes) the temporary file.
func (s *keySet) close() {
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
}

// repeats yields, once every entry has been added, the entries of file
// rows whose key a stored record or another row of the same contract
// has, a batch at a time.
type repeats struct {
	s       *keySet
	work    []keyBucket // buckets still to read, the next last
	inMem   bool        // the entries held in memory are still to group
	es, tmp []keyEntry  // a bucket's entries, and grouped by key
	counts  []uint32
	maxN    int64 // entries of the largest bucket that fits in memory
	at      int   // next entry of tmp to look at
	// groupUsed and groupBits are the bits of the key that grouped tmp.
	groupUsed, groupBits int
	out                  []keyEntry
	rbuf                 []byte
}

// repeatBatch is about the most entries a batch of repeats holds (the
// rows of one key are not cut).
const repeatBatch = 4096

func (s *keySet) repeats() (*repeats, error) {
	r := &repeats{s: s, out: make([]keyEntry, 0, repeatBatch)}
	if s.err != nil {
		return nil, s.err
	}
	if s.file == nil {
		r.inMem, r.es = true, s.mem
		return r, nil
	}
	for i := len(s.buckets) - 1; i >= 0; i-- {
		b := &s.buckets[i]
		if s.writeBlock(b); s.err != nil {
			return nil, s.err
		}
		s.hold(-int64(cap(b.buf)))
		b.buf = nil
		if b.n > 0 {
			r.work = append(r.work, *b)
			if b.n <= int64(s.resident) {
				r.maxN = max(r.maxN, b.n)
			}
		}
	}
	s.buckets = nil
	return r, nil
}

// next returns the next batch, nil at the end.
func (r *repeats) next() ([]keyEntry, error) {
	r.out = r.out[:0]
	for len(r.out) < repeatBatch {
		if r.at < len(r.tmp) {
			r.scan()
			continue
		}
		if r.inMem {
			r.inMem = false
			r.group(r.es, 0)
			r.s.hold(-int64(cap(r.s.mem)) * keyEntrySize)
			r.s.mem, r.es = nil, nil
			continue
		}
		if len(r.work) == 0 {
			r.tmp = nil
			break
		}
		b := r.work[len(r.work)-1]
		r.work = r.work[:len(r.work)-1]
		if b.n > int64(r.s.resident) {
			if err := r.split(b); err != nil {
				return nil, err
			}
			continue
		}
		if err := r.read(b); err != nil {
			return nil, err
		}
		r.group(r.es, b.used)
	}
	if len(r.out) == 0 {
		return nil, nil
	}
	return r.out, nil
}

// readBlocks calls fn with each entry of bucket b, in the order written.
func (r *repeats) readBlocks(b keyBucket, fn func(keyEntry)) error {
	if r.rbuf == nil {
		size := max(minKeyBlock, min(keyReadBuf, r.s.writeMem/4)) / keyEntrySize * keyEntrySize
		r.rbuf = make([]byte, size)
		r.s.hold(size)
	}
	for _, bl := range b.blocks {
		for done := 0; done < bl.size; {
			n := min(bl.size-done, len(r.rbuf))
			if _, err := r.s.file.ReadAt(r.rbuf[:n], bl.off+int64(done)); err != nil {
				return fmt.Errorf("reading record keys back: %w", err)
			}
			for i := 0; i < n; i += keyEntrySize {
				p := r.rbuf[i : i+keyEntrySize]
				fn(keyEntry{binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint32(p[8:]), binary.LittleEndian.Uint32(p[12:])})
			}
			done += n
		}
	}
	return nil
}

// read reads bucket b into es.
func (r *repeats) read(b keyBucket) error {
	if cap(r.es) < int(b.n) {
		n := max(b.n, r.maxN) // once for all, but for buckets split again
		r.s.hold((n - int64(cap(r.es))) * keyEntrySize)
		r.es = make([]keyEntry, 0, n)
	}
	r.es = r.es[:0]
	return r.readBlocks(b, func(e keyEntry) { r.es = append(r.es, e) })
}

// split splits bucket b, too large for memory, by the next bits of the key
// into buckets written at the end of the file, to be read in its place.
func (r *repeats) split(b keyBucket) error {
	s := r.s
	if b.used >= 64 {
		return errKeySetFull
	}
	k := s.bucketBits(b.n, b.used)
	subs := s.newBuckets(k, b.used)
	var first uint64
	seen, same := false, true
	err := r.readBlocks(b, func(e keyEntry) {
		if !seen {
			first, seen = e.key, true
		}
		same = same && e.key == first
		s.put(&subs[(e.key<<b.used)>>(64-k)], e)
	})
	if err != nil {
		return err
	}
	if same {
		return errKeySetFull // no bits to split it by
	}
	for i := len(subs) - 1; i >= 0; i-- {
		if s.writeBlock(&subs[i]); s.err != nil {
			return s.err
		}
		s.hold(-int64(cap(subs[i].buf)))
		subs[i].buf = nil
		if subs[i].n > 0 {
			r.work = append(r.work, subs[i])
		}
	}
	return nil
}

// group orders es into tmp by the bits of the key after the first used
// (a counting sort), so that equal keys are next to one another, mostly
// alone in their group.
func (r *repeats) group(es []keyEntry, used int) {
	r.at = 0
	if len(es) < 2 {
		r.tmp = r.tmp[:0]
		return
	}
	// About four entries a group: the counts stay small (more of them in
	// the caches), and a group is quick to look through.
	b := min(max(0, bits.Len(uint(len(es)))-3), 64-used)
	if cap(r.tmp) < len(es) {
		n := max(len(es), cap(es))
		r.s.hold(int64(n-cap(r.tmp)) * keyEntrySize)
		r.tmp = make([]keyEntry, n)
	}
	r.tmp = r.tmp[:len(es)]
	n := 1<<b + 1
	if cap(r.counts) < n {
		r.s.hold(int64(n-cap(r.counts)) * 4)
		r.counts = make([]uint32, n)
	}
	counts := r.counts[:n]
	clear(counts)
	for _, e := range es {
		counts[(e.key<<used)>>(64-b)+1]++
	}
	for i := 1; i < n; i++ {
		counts[i] += counts[i-1]
	}
	for _, e := range es {
		g := (e.key << used) >> (64 - b)
		r.tmp[counts[g]] = e
		counts[g]++
	}
	r.groupUsed, r.groupBits = used, b
}

// scan looks at the group at r.at in tmp and puts the file rows of the
// contract's repeated keys in out.
func (r *repeats) scan() {
	g := func(e keyEntry) uint64 { return (e.key << r.groupUsed) >> (64 - r.groupBits) }
	i := r.at
	j := i + 1
	for j < len(r.tmp) && g(r.tmp[j]) == g(r.tmp[i]) {
		j++
	}
	r.at = j
	if j-i < 2 {
		return
	}
	grp := r.tmp[i:j]
	if len(grp) <= 16 {
		// Each row whose key and contract another entry of the group has.
		for a, e := range grp {
			if e.stored() {
				continue
			}
			for z, f := range grp {
				if z != a && f.key == e.key && f.contract == e.contract {
					r.out = append(r.out, e)
					break
				}
			}
		}
		return
	}
	slices.SortFunc(grp, func(x, y keyEntry) int {
		return cmp.Or(cmp.Compare(x.key, y.key), cmp.Compare(x.contract, y.contract))
	})
	for a := 0; a < len(grp); {
		z := a + 1
		for z < len(grp) && grp[z].key == grp[a].key && grp[z].contract == grp[a].contract {
			z++
		}
		if z-a > 1 {
			for _, e := range grp[a:z] {
				if !e.stored() {
					r.out = append(r.out, e)
				}
			}
		}
		a = z
	}
}

// recordKey is the key of a record id within a contract, from the maphash
// of each (same seed).
func recordKey(contractHash, recordHash uint64) uint64 {
	// splitmix64's finaliser over the combination, so that every bit of
	// the key (the high ones choose its bucket, the next ones its group)
	// depends on both.
	x := recordHash ^ bits.RotateLeft64(contractHash, 31)*0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
