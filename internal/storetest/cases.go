package storetest

import (
	"database/sql"
	"errors"
	"github.com/batonhq/baton/internal/leaseinfo"
	"slices"
	"time"

	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// Cases is the suite, one case per contract.
func Cases() []Case {
	return []Case{
		{"Candidates/PendingUnleasedOnly", candidatesPendingUnleased},
		{"Candidates/Limit", candidatesLimit},
		{"Claim/WinsAtTheVersionRead", claimWins},
		{"Claim/CompareAndSetOnVersion", claimCompareAndSet},
		{"Claim/SkipsRowsFencedByABatch", claimSkipsFenced},
		{"StaleCandidates/OnlyExpiredOwnedRows", staleCandidates},
		{"Claim/TakeoverOfAnExpiredLease", claimTakeover},
		{"Heartbeat/RenewsOnlyCurrentLeases", heartbeatRenews},
		{"Heartbeat/RegistersTheWorker", heartbeatRegisters},
		{"Inspect/CurrentLeasesWithRemainingTime", inspect},
		{"Fence/OnlyTheCurrentOwner", fenceOwner},
		{"Advance/CommitsTheCheckpoint", advanceCommits},
		{"Advance/CheckpointMovedSinceTheFence", advanceMoved},
		{"Advance/RolledBackBatchChangesNothing", advanceRollback},
		{"Split/SegmentsAreClaimableRowsAndCommitWithTheCheckpoint", splitCommits},
		{"Split/RolledBackChangesNothing", splitRollback},
		{"Rewind/DeletesSegmentsAndFencesTheirClaims", rewindDeletesSegments},
		{"Rewind/FindsSegmentsSplitWhileItWaits", rewindAfterSplitCommits},
		{"Release/BumpsVersionAndFreesAtOnce", release},
		{"Release/OnlyCurrentLeasesOfTheOwner", releaseFenced},
		{"Fail/BacksOffThenQuarantines", fail},
		{"Fail/FencedByVersion", failFenced},
		{"Retry/ReenablesFailedPartitions", retry},
		{"Progress/VersionAndPosition", progress},
		{"FairShareLoad/CountsHeldClaimableAndLiveWorkers", fairShareLoad},
		{"FairShareLoad/MinHeldLeavingAndWanted", fairShareMinHeld},
		{"FairShareLoad/Backlog", fairShareBacklog},
		{"StaleCandidates/NotWhileTheOwnerIsLive", staleOwnerLive},
		{"Heartbeat/RewritesOnlyLeasesBelowTheThreshold", heartbeatThreshold},
		{"Heartbeat/HandsBackItsUnlistedRowsPastTheirLeases", heartbeatHandBack},
		{"ClaimGroup/FencesUpToTheLimitAndClaimsEveryMember", groupClaims},
		{"ClaimGroup/PassesOverACandidateFencedElsewhere", groupPassesOver},
		{"ClaimGroup/RolledBackChangesNothing", groupRollback},
		{"HeldGroup/FencesEachMemberByItsOwnClaim", heldGroup},
		{"HeldGroup/RolledBackChangesNothing", heldGroupRollback},
		{"StopWorker/LeavesTheLiveCountForGood", stopWorker},
		{"Produce/CaughtUpPartitionBecomesClaimable", produce},
		{"ClaimWithBatch/ClaimCheckpointAndReleaseCommitTogether", claimBatchReleases},
		{"ClaimWithBatch/KeptWithoutRelease", claimBatchKept},
		{"ClaimWithBatch/FenceExcludesOtherClaims", claimBatchFenceExcludes},
		{"ClaimWithBatch/LostToACommittedClaim", claimBatchLost},
		{"ClaimWithBatch/RolledBackChangesNothing", claimBatchRollback},
		{"PendingWork/OwnedUnownedBackingOffNotQuarantined", pendingWork},
		{"SegmentsHeldByOthers/LiveLeasesOfOtherOwnersOnThosePartitions", segmentsHeldByOthers},
		{"Pause/NeverClaimedOwnerToldResumedClaimable", pauseCase},
		{kindCasePrefix + "CandidatesOfTheStoresKindOnly", kindCandidates},
		{kindCasePrefix + "ClaimWinsOnlyTheStoresKind", kindClaim},
	}
}

// ---- helpers ----------------------------------------------------------

func (c *C) must(err error, what string) {
	if err != nil {
		c.Fatalf("%s: %v", what, err)
	}
}

func candKeys(cs []taskstore.Candidate) []string {
	out := make([]string, len(cs))
	for i, x := range cs {
		out[i] = x.Key
	}
	slices.Sort(out)
	return out
}

func claimedKeys(cs []taskstore.Claimed) []string {
	out := make([]string, len(cs))
	for i, x := range cs {
		out[i] = x.Key
	}
	slices.Sort(out)
	return out
}

func sorted(ks ...string) []string {
	ks = slices.Clone(ks)
	slices.Sort(ks)
	if ks == nil {
		ks = []string{}
	}
	return ks
}

func (c *C) wantKeys(what string, got, want []string) {
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, sorted(want...)) {
		c.Errorf("%s: got %v, want %v", what, got, sorted(want...))
	}
}

func (c *C) candidates(h Harness, limit int) []taskstore.Candidate {
	cs, err := h.Candidates(c.Ctx, limit)
	c.must(err, "Candidates")
	return cs
}

// claimOne claims key for owner from a fresh candidate read and fails the
// case unless it is won.
func (c *C) claimOne(h Harness, owner, key string) taskstore.Claimed {
	for _, x := range c.candidates(h, 100) {
		if x.Key != key {
			continue
		}
		won, err := h.Claim(c.Ctx, owner, []taskstore.Candidate{x})
		c.must(err, "Claim")
		if len(won) != 1 || won[0].Key != key {
			c.Fatalf("claim of %s by %s won %v", key, owner, won)
		}
		return won[0]
	}
	c.Fatalf("%s is not a candidate", key)
	return taskstore.Claimed{}
}

func (c *C) load(h Harness) taskstore.Load {
	l, err := h.FairShareLoad(c.Ctx, "")
	c.must(err, "FairShareLoad")
	return l
}

// ---- cases ------------------------------------------------------------

func candidatesPendingUnleased(c *C, h Harness) {
	h.AddPartition("a", 5)
	h.AddPartition("b", 0)
	h.AddPartition("c", 3)
	c.claimOne(h, "w1", "c")
	cs := c.candidates(h, 10)
	c.wantKeys("candidates (b has no work, c is leased)", candKeys(cs), []string{"a"})
	if len(cs) == 1 && cs[0].Owned {
		c.Errorf("an unowned row is a candidate with Owned set")
	}
}

func candidatesLimit(c *C, h Harness) {
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		h.AddPartition(k, 1)
	}
	if n := len(c.candidates(h, 3)); n != 3 {
		c.Errorf("Candidates(3) returned %d rows of 5 claimable", n)
	}
}

func claimWins(c *C, h Harness) {
	h.AddPartition("a", 5)
	cs := c.candidates(h, 10)
	if len(cs) != 1 {
		c.Fatalf("candidates = %v", cs)
	}
	won, err := h.Claim(c.Ctx, "w1", cs)
	c.must(err, "Claim")
	if len(won) != 1 {
		c.Fatalf("claim of a fresh candidate won %v", won)
	}
	got := won[0]
	if got.Key != "a" || got.Version <= cs[0].Version || got.Takeover || got.Position != 0 || got.Available != 5 {
		c.Errorf("claimed %+v; want a at a version above %d, no takeover, position 0, available 5", got, cs[0].Version)
	}
	if v, _, err := h.Progress(c.Ctx, "a"); err != nil || v != got.Version {
		c.Errorf("Progress after the claim = v%d, %v; want v%d", v, err, got.Version)
	}
	c.wantKeys("candidates while leased", candKeys(c.candidates(h, 10)), nil)
}

func claimCompareAndSet(c *C, h Harness) {
	h.AddPartition("a", 5)
	h.AddPartition("b", 5)
	cs := c.candidates(h, 10)
	// Two workers read the same candidates; the first claim wins them.
	won, err := h.Claim(c.Ctx, "w1", cs)
	c.must(err, "Claim by w1")
	c.wantKeys("won by w1", claimedKeys(won), []string{"a", "b"})
	// The second, with the versions it read, wins nothing, even once the
	// rows are claimable again: the release moved the version on.
	lost, err := h.Claim(c.Ctx, "w2", cs)
	c.must(err, "Claim by w2")
	c.wantKeys("won by w2 with versions read before w1's claim", claimedKeys(lost), nil)
	leases := []partition.Lease{won[0].Lease, won[1].Lease}
	if _, err := h.Release(c.Ctx, "w1", leases); err != nil {
		c.Fatalf("Release: %v", err)
	}
	lost, err = h.Claim(c.Ctx, "w2", cs)
	c.must(err, "Claim by w2 after the release")
	c.wantKeys("won by w2 with versions read before claim and release", claimedKeys(lost), nil)
	// A candidate whose row no longer has work is not won either.
	h.AddPartition("c", 1)
	cc := c.candidates(h, 10)
	var forC []taskstore.Candidate
	for _, x := range cc {
		if x.Key == "c" {
			forC = append(forC, x)
		}
	}
	cl := c.claimOne(h, "w1", "c")
	b, _, err := h.Begin(c.Ctx, "w1", cl.Lease)
	c.must(err, "Begin")
	c.must(b.Advance(c.Ctx, 0, 1), "Advance")
	c.must(b.Commit(c.Ctx), "Commit")
	if _, err := h.Release(c.Ctx, "w1", []partition.Lease{cl.Lease}); err != nil {
		c.Fatalf("Release: %v", err)
	}
	if won, err := h.Claim(c.Ctx, "w2", forC); err != nil || len(won) != 0 {
		c.Errorf("claim of a caught-up row = %v, %v; want nothing won", won, err)
	}
}

func claimSkipsFenced(c *C, h Harness) {
	h.AddPartition("a", 5)
	cl := c.claimOne(h, "w1", "a")
	b, _, err := h.Begin(c.Ctx, "w1", cl.Lease)
	c.must(err, "Begin")
	defer b.Rollback()
	// The lease expires while the batch is in flight: the row is a
	// candidate, but a claim does not wait for the batch's fence, nor
	// take the row from under it.
	h.ExpireLease("a")
	cs := c.candidates(h, 10)
	if len(cs) != 1 {
		c.Fatalf("candidates after expiry = %v", cs)
	}
	won, err := h.Claim(c.Ctx, "w2", cs)
	c.must(err, "Claim")
	c.wantKeys("won while fenced by a batch", claimedKeys(won), nil)
	b.Rollback()
	won, err = h.Claim(c.Ctx, "w2", cs)
	c.must(err, "Claim after the batch ended")
	c.wantKeys("won once the batch ended", claimedKeys(won), []string{"a"})
}

func staleCandidates(c *C, h Harness) {
	h.AddPartition("free", 5)
	h.AddPartition("live", 5)
	h.AddPartition("dead", 5)
	h.AddPartition("released", 5)
	h.AddPartition("failed", 5)
	c.claimOne(h, "w1", "live")
	c.claimOne(h, "w1", "dead")
	rel := c.claimOne(h, "w1", "released")
	fl := c.claimOne(h, "w1", "failed")
	if _, err := h.Release(c.Ctx, "w1", []partition.Lease{rel.Lease}); err != nil {
		c.Fatalf("Release: %v", err)
	}
	if _, err := h.Fail(c.Ctx, "w1", fl.Lease, "boom", 5); err != nil {
		c.Fatalf("Fail: %v", err)
	}
	h.ExpireLease("dead")
	h.ExpireLease("failed") // its back-off is over, but nobody owns it
	st, err := h.StaleCandidates(c.Ctx, 10)
	c.must(err, "StaleCandidates")
	c.wantKeys("stale candidates", candKeys(st), []string{"dead"})
	for _, x := range st {
		if !x.Owned {
			c.Errorf("stale candidate %s without Owned", x.Key)
		}
	}
	all := c.candidates(h, 10)
	c.wantKeys("candidates", candKeys(all), []string{"free", "dead", "released", "failed"})
	for _, x := range all {
		if x.Owned != (x.Key == "dead") {
			c.Errorf("candidate %s: Owned = %v", x.Key, x.Owned)
		}
	}
}

func claimTakeover(c *C, h Harness) {
	h.AddPartition("a", 5)
	old := c.claimOne(h, "w1", "a")
	h.ExpireLease("a")
	st, err := h.StaleCandidates(c.Ctx, 10)
	c.must(err, "StaleCandidates")
	won, err := h.Claim(c.Ctx, "w2", st)
	c.must(err, "Claim")
	if len(won) != 1 || !won[0].Takeover || won[0].Version <= old.Version {
		c.Fatalf("takeover claim won %+v; want a, Takeover, version above %d", won, old.Version)
	}
	// The old owner's lease is gone: it renews nothing and fences nothing.
	rs, err := h.HeartbeatBelow(c.Ctx, "w1", 0, []partition.Lease{old.Lease})
	c.must(err, "Heartbeat")
	if len(rs) != 0 {
		c.Errorf("the old owner renewed %v after the takeover", rs)
	}
	if _, _, err := h.Begin(c.Ctx, "w1", old.Lease); !errors.Is(err, partition.ErrFenced) {
		c.Errorf("old owner's fence after the takeover: %v, want ErrFenced", err)
	}
}

func heartbeatRenews(c *C, h Harness) {
	h.AddPartition("a", 5)
	h.AddPartition("b", 5)
	h.AddPartition("c", 5)
	a := c.claimOne(h, "w1", "a")
	b := c.claimOne(h, "w1", "b")
	other := c.claimOne(h, "w2", "c")
	h.ExpireLease("b") // expired but not taken over: still w1's
	stale := partition.Lease{Key: "a", Version: a.Version - 1}
	rs, err := h.HeartbeatBelow(c.Ctx, "w1", 0, []partition.Lease{a.Lease, b.Lease, other.Lease, stale})
	c.must(err, "Heartbeat")
	got := map[string]leaseinfo.Renewal{}
	for _, r := range rs {
		got[r.Key] = r
	}
	if len(rs) != 2 || got["a"].Version != a.Version || got["b"].Version != b.Version {
		c.Errorf("renewed %+v; want a@v%d and b@v%d only", rs, a.Version, b.Version)
	}
	if r := got["a"]; r.Available != 5 || r.Position != 0 {
		c.Errorf("renewal of a reports available %d position %d; want 5, 0", r.Available, r.Position)
	}
	// b's lease runs again: it is no longer a candidate.
	c.wantKeys("candidates after renewing the expired lease", candKeys(c.candidates(h, 10)), nil)
}

func heartbeatRegisters(c *C, h Harness) {
	if n := c.load(h).LiveWorkers; n != 0 {
		c.Fatalf("live workers in an empty store: %d", n)
	}
	_, err := h.HeartbeatBelow(c.Ctx, "w1", 0, nil)
	c.must(err, "Heartbeat w1")
	_, err = h.HeartbeatBelow(c.Ctx, "w2", 0, nil)
	c.must(err, "Heartbeat w2")
	_, err = h.HeartbeatBelow(c.Ctx, "w1", 0, nil)
	c.must(err, "second Heartbeat w1")
	if n := c.load(h).LiveWorkers; n != 2 {
		c.Errorf("live workers after heartbeats of w1, w2, w1: %d, want 2", n)
	}
	h.ExpireWorker("w2")
	if n := c.load(h).LiveWorkers; n != 1 {
		c.Errorf("live workers after w2's registration expired: %d, want 1", n)
	}
	_, err = h.HeartbeatBelow(c.Ctx, "w2", 0, nil)
	c.must(err, "Heartbeat w2 again")
	if n := c.load(h).LiveWorkers; n != 2 {
		c.Errorf("live workers after w2 heartbeats again: %d, want 2", n)
	}
}

func inspect(c *C, h Harness) {
	h.AddPartition("a", 5)
	h.AddPartition("b", 5)
	a := c.claimOne(h, "w1", "a")
	b := c.claimOne(h, "w2", "b")
	hs, err := h.Inspect(c.Ctx, "w1", []partition.Lease{a.Lease, b.Lease, {Key: "a", Version: a.Version + 1}})
	c.must(err, "Inspect")
	if len(hs) != 1 || hs[0].Lease != a.Lease {
		c.Fatalf("Inspect = %+v; want only %v", hs, a.Lease)
	}
	if r := hs[0].Remaining; r <= 0 || r > TTL {
		c.Errorf("remaining lease %s; want in (0, %s]", r, TTL)
	}
	h.ExpireLease("a")
	hs, err = h.Inspect(c.Ctx, "w1", []partition.Lease{a.Lease})
	c.must(err, "Inspect after expiry")
	if len(hs) != 1 || hs[0].Remaining != 0 {
		c.Errorf("Inspect of an expired, not taken over lease = %+v; want it with 0 remaining", hs)
	}
}

func fenceOwner(c *C, h Harness) {
	h.AddPartition("a", 5)
	a := c.claimOne(h, "w1", "a")
	if _, _, err := h.Begin(c.Ctx, "w2", a.Lease); !errors.Is(err, partition.ErrFenced) {
		c.Errorf("fence by another owner: %v, want ErrFenced", err)
	}
	if _, _, err := h.Begin(c.Ctx, "w1", partition.Lease{Key: "a", Version: a.Version - 1}); !errors.Is(err, partition.ErrFenced) {
		c.Errorf("fence at an older version: %v, want ErrFenced", err)
	}
	b, cp, err := h.Begin(c.Ctx, "w1", a.Lease)
	c.must(err, "Begin by the owner")
	b.Rollback()
	if cp.Position != 0 || cp.Available != 5 {
		c.Errorf("fence read position %d available %d; want 0, 5", cp.Position, cp.Available)
	}
	if _, err := h.Release(c.Ctx, "w1", []partition.Lease{a.Lease}); err != nil {
		c.Fatalf("Release: %v", err)
	}
	if _, _, err := h.Begin(c.Ctx, "w1", a.Lease); !errors.Is(err, partition.ErrFenced) {
		c.Errorf("fence after release: %v, want ErrFenced", err)
	}
}

func advanceCommits(c *C, h Harness) {
	h.AddPartition("a", 5)
	a := c.claimOne(h, "w1", "a")
	for _, step := range [][2]int64{{0, 3}, {3, 5}} {
		b, cp, err := h.Begin(c.Ctx, "w1", a.Lease)
		c.must(err, "Begin")
		if cp.Position != step[0] {
			c.Errorf("fence read position %d, want %d", cp.Position, step[0])
		}
		c.must(b.Advance(c.Ctx, step[0], step[1]), "Advance")
		c.must(b.Commit(c.Ctx), "Commit")
		v, pos, err := h.Progress(c.Ctx, "a")
		c.must(err, "Progress")
		if v != a.Version || pos != step[1] {
			c.Errorf("after committing %d..%d: v%d position %d; want v%d position %d", step[0], step[1], v, pos, a.Version, step[1])
		}
	}
	// Caught up: no longer a candidate, even once its lease ends.
	h.ExpireLease("a")
	c.wantKeys("candidates after catching up", candKeys(c.candidates(h, 10)), nil)
}

func advanceMoved(c *C, h Harness) {
	h.AddPartition("a", 5)
	a := c.claimOne(h, "w1", "a")
	// Two batches of the same claim read the same checkpoint (a retry of a
	// commit whose outcome was unknown, while that commit was still
	// applying): the second must not commit on top of the first.
	first, _, err := h.Begin(c.Ctx, "w1", a.Lease)
	c.must(err, "Begin first")
	second, _, err := h.Begin(c.Ctx, "w1", a.Lease)
	c.must(err, "Begin second")
	defer second.Rollback()
	c.must(first.Advance(c.Ctx, 0, 3), "Advance first")
	c.must(first.Commit(c.Ctx), "Commit first")
	if err := second.Advance(c.Ctx, 0, 2); !errors.Is(err, partition.ErrCheckpointMoved) {
		c.Errorf("second batch's Advance from the old checkpoint: %v, want ErrCheckpointMoved", err)
	}
	second.Rollback()
	if v, pos, err := h.Progress(c.Ctx, "a"); err != nil || v != a.Version || pos != 3 {
		c.Errorf("Progress = v%d %d, %v; want v%d 3", v, pos, err, a.Version)
	}
}

func advanceRollback(c *C, h Harness) {
	h.AddPartition("a", 5)
	a := c.claimOne(h, "w1", "a")
	b, _, err := h.Begin(c.Ctx, "w1", a.Lease)
	c.must(err, "Begin")
	c.must(b.Advance(c.Ctx, 0, 4), "Advance")
	b.Rollback()
	if _, pos, err := h.Progress(c.Ctx, "a"); err != nil || pos != 0 {
		c.Errorf("position after a rolled-back batch: %d, %v; want 0", pos, err)
	}
}

func splitCommits(c *C, h Harness) {
	h.AddPartition("a", 30)
	a := c.claimOne(h, "w1", "a")
	b, _, err := h.Begin(c.Ctx, "w1", a.Lease)
	c.must(err, "Begin")
	c.must(b.Split(c.Ctx, 0, 30, []taskstore.Segment{{Start: 0, End: 10}, {Start: 10, End: 20}, {Start: 20, End: 30}}), "Split")
	c.must(b.Commit(c.Ctx), "Commit")
	if v, pos, err := h.Progress(c.Ctx, "a"); err != nil || v != a.Version || pos != 30 {
		c.Errorf("the partition after its split: v%d position %d, %v; want v%d position 30", v, pos, err, a.Version)
	}
	segs := []string{partition.SegmentKey("a", 0), partition.SegmentKey("a", 10), partition.SegmentKey("a", 20)}
	c.wantKeys("candidates after the split", candKeys(c.candidates(h, 10)), segs)
	for i, k := range segs {
		if v, pos, err := h.Progress(c.Ctx, k); err != nil || v != 0 || pos != int64(10*i) {
			c.Errorf("segment %s: v%d position %d, %v; want v0 position %d", k, v, pos, err, 10*i)
		}
	}
	// A segment is processed like a partition, up to its end.
	s := c.claimOne(h, "w2", segs[1])
	sb, cp, err := h.Begin(c.Ctx, "w2", s.Lease)
	c.must(err, "Begin segment")
	if cp.Position != 10 || cp.Available != 20 {
		c.Errorf("segment's fence read %d of %d; want 10 of 20", cp.Position, cp.Available)
	}
	c.must(sb.Advance(c.Ctx, 10, 20), "Advance segment")
	c.must(sb.Commit(c.Ctx), "Commit segment")
	if _, pos, err := h.Progress(c.Ctx, segs[1]); err != nil || pos != 20 {
		c.Errorf("segment %s at %d, %v; want 20", segs[1], pos, err)
	}
}

func splitRollback(c *C, h Harness) {
	h.AddPartition("a", 30)
	a := c.claimOne(h, "w1", "a")
	b, _, err := h.Begin(c.Ctx, "w1", a.Lease)
	c.must(err, "Begin")
	c.must(b.Split(c.Ctx, 0, 30, []taskstore.Segment{{Start: 0, End: 15}, {Start: 15, End: 30}}), "Split")
	b.Rollback()
	if _, pos, err := h.Progress(c.Ctx, "a"); err != nil || pos != 0 {
		c.Errorf("position after a rolled-back split: %d, %v; want 0", pos, err)
	}
	h.ExpireLease("a")
	c.wantKeys("candidates after a rolled-back split", candKeys(c.candidates(h, 10)), []string{"a"})
}

// notFound reports whether err says a row does not exist (the model's
// ErrNotFound, PostgreSQL's empty result).
func notFound(err error) bool {
	return errors.Is(err, partition.ErrNotFound) || errors.Is(err, sql.ErrNoRows)
}

// rewound checks what a rewind of a partition at version v, processed to
// position prev, to position 0, returned.
func (c *C) rewound(r partition.Rewound, err error, key string, v, prev int64) {
	c.must(err, "Rewind")
	want := partition.Rewound{Key: key, Generation: 2, Version: v + 1, PreviousGeneration: 1, PreviousPosition: prev}
	if r != want {
		c.Errorf("rewound %+v; want %+v", r, want)
	}
}

func rewindDeletesSegments(c *C, h Harness) {
	h.AddPartition("a", 30)
	a := c.claimOne(h, "w1", "a")
	b, _, err := h.Begin(c.Ctx, "w1", a.Lease)
	c.must(err, "Begin")
	c.must(b.Split(c.Ctx, 0, 30, []taskstore.Segment{{Start: 0, End: 15}, {Start: 15, End: 30}}), "Split")
	c.must(b.Commit(c.Ctx), "Commit")
	segs := []string{partition.SegmentKey("a", 0), partition.SegmentKey("a", 15)}
	s := c.claimOne(h, "w2", segs[1])

	r, err := h.Rewind(c.Ctx, "a", 0, nil)
	c.rewound(r, err, "a", a.Version, 30)
	for _, k := range segs {
		if _, _, err := h.Progress(c.Ctx, k); !notFound(err) {
			c.Errorf("segment %s after the rewind: %v; want ErrNotFound", k, err)
		}
	}
	if _, _, err := h.Begin(c.Ctx, "w2", s.Lease); !errors.Is(err, partition.ErrFenced) {
		c.Errorf("a batch of the claim of a deleted segment: %v; want ErrFenced", err)
	}
	if _, _, err := h.Begin(c.Ctx, "w1", a.Lease); !errors.Is(err, partition.ErrFenced) {
		c.Errorf("a batch of the claim the rewind superseded: %v; want ErrFenced", err)
	}
	cands := c.candidates(h, 10)
	if len(cands) != 1 || cands[0].Key != "a" || cands[0].Version != r.Version || cands[0].Owned {
		c.Errorf("candidates after the rewind: %v; want a, unowned, at v%d", cands, r.Version)
	}
	if v, pos, err := h.Progress(c.Ctx, "a"); err != nil || v != r.Version || pos != 0 {
		c.Errorf("the partition after the rewind: v%d position %d, %v; want v%d position 0", v, pos, err, r.Version)
	}
}

// A rewind waits for the batch holding its partition's row; that batch
// splits the partition and commits while the rewind waits. The rewind
// still deletes the segments it wrote: nothing of the old generation is
// left claimable, and the new generation splits at the same starts.
func rewindAfterSplitCommits(c *C, h Harness) {
	h.AddPartition("a", 30)
	a := c.claimOne(h, "w1", "a")
	b, _, err := h.Begin(c.Ctx, "w1", a.Lease)
	c.must(err, "Begin")
	segs := []taskstore.Segment{{Start: 0, End: 15}, {Start: 15, End: 30}}
	c.must(b.Split(c.Ctx, 0, 30, segs), "Split")
	r, err := h.Rewind(c.Ctx, "a", 0, func() { c.must(b.Commit(c.Ctx), "Commit of the split") })
	c.rewound(r, err, "a", a.Version, 30)

	c.wantKeys("candidates after the rewind", candKeys(c.candidates(h, 10)), []string{"a"})
	for _, g := range segs {
		k := partition.SegmentKey("a", g.Start)
		if _, _, err := h.Progress(c.Ctx, k); !notFound(err) {
			c.Errorf("segment %s after the rewind: %v; want ErrNotFound", k, err)
		}
	}
	next := c.claimOne(h, "w2", "a")
	b, cp, err := h.Begin(c.Ctx, "w2", next.Lease)
	c.must(err, "Begin after the rewind")
	if cp.Position != 0 || cp.Available != 30 {
		c.Errorf("the fence after the rewind read %d of %d; want 0 of 30", cp.Position, cp.Available)
	}
	c.must(b.Split(c.Ctx, 0, 30, segs), "Split of the new generation at the same starts")
	c.must(b.Commit(c.Ctx), "Commit of the new generation's split")
	c.wantKeys("candidates after the new generation's split", candKeys(c.candidates(h, 10)),
		[]string{partition.SegmentKey("a", 0), partition.SegmentKey("a", 15)})
}

func release(c *C, h Harness) {
	h.AddPartition("a", 5)
	h.AddPartition("b", 5)
	a := c.claimOne(h, "w1", "a")
	b := c.claimOne(h, "w1", "b")
	keys, err := h.Release(c.Ctx, "w1", []partition.Lease{a.Lease, b.Lease})
	c.must(err, "Release")
	slices.Sort(keys)
	c.wantKeys("released", keys, []string{"a", "b"})
	cs := c.candidates(h, 10)
	c.wantKeys("candidates right after the release", candKeys(cs), []string{"a", "b"})
	for _, x := range cs {
		if x.Owned {
			c.Errorf("released %s is a candidate with Owned set (a claim would wait for confirmation)", x.Key)
		}
		if want := map[string]int64{"a": a.Version, "b": b.Version}[x.Key]; x.Version <= want {
			c.Errorf("released %s at v%d; want the version bumped past v%d", x.Key, x.Version, want)
		}
	}
}

func releaseFenced(c *C, h Harness) {
	h.AddPartition("a", 5)
	h.AddPartition("b", 5)
	a := c.claimOne(h, "w1", "a")
	b := c.claimOne(h, "w2", "b")
	keys, err := h.Release(c.Ctx, "w1", []partition.Lease{{Key: "a", Version: a.Version - 1}, b.Lease})
	c.must(err, "Release")
	c.wantKeys("released under a stale version and another owner's lease", keys, nil)
	if v, _, _ := h.Progress(c.Ctx, "a"); v != a.Version {
		c.Errorf("a moved to v%d", v)
	}
	if v, _, _ := h.Progress(c.Ctx, "b"); v != b.Version {
		c.Errorf("b moved to v%d", v)
	}
	keys, err = h.Release(c.Ctx, "w1", nil)
	c.must(err, "Release of nothing")
	c.wantKeys("released of nothing", keys, nil)
}

func fail(c *C, h Harness) {
	h.AddPartition("a", 5)
	const maxAttempts = 3
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if attempt > 1 {
			h.ExpireLease("a") // the back-off is over
		}
		l := c.claimOne(h, "w1", "a")
		r, err := h.Fail(c.Ctx, "w1", l.Lease, "boom", maxAttempts)
		c.must(err, "Fail")
		quarantine := attempt == maxAttempts
		want := min(Backoff<<(attempt-1), MaxBackoff)
		if quarantine {
			want = 0
		}
		if r.Attempts != attempt || r.Quarantined != quarantine || r.RetryAfter != want {
			c.Errorf("failure %d: %+v; want attempts %d, quarantined %v, retry after %s", attempt, r, attempt, quarantine, want)
		}
		if v, _, _ := h.Progress(c.Ctx, "a"); v <= l.Version {
			c.Errorf("failure %d left the version at v%d", attempt, v)
		}
		// Backing off or quarantined: not claimable.
		c.wantKeys("candidates after a failure", candKeys(c.candidates(h, 10)), nil)
	}
	h.ExpireLease("a") // no effect on a quarantined row
	c.wantKeys("candidates of a quarantined partition", candKeys(c.candidates(h, 10)), nil)
	if q, err := h.QuarantinedCount(c.Ctx); err != nil || q != 1 {
		c.Errorf("QuarantinedCount = %d, %v; want 1", q, err)
	}
}

func failFenced(c *C, h Harness) {
	h.AddPartition("a", 5)
	a := c.claimOne(h, "w1", "a")
	if _, err := h.Fail(c.Ctx, "w2", a.Lease, "boom", 3); !errors.Is(err, partition.ErrFenced) {
		c.Errorf("Fail by another owner: %v, want ErrFenced", err)
	}
	if _, err := h.Fail(c.Ctx, "w1", partition.Lease{Key: "a", Version: a.Version - 1}, "boom", 3); !errors.Is(err, partition.ErrFenced) {
		c.Errorf("Fail at an older version: %v, want ErrFenced", err)
	}
	if v, _, _ := h.Progress(c.Ctx, "a"); v != a.Version {
		c.Errorf("a fenced failure moved a to v%d", v)
	}
}

func retry(c *C, h Harness) {
	h.AddPartition("q", 5)
	h.AddPartition("backoff", 5)
	h.AddPartition("healthy", 5)
	q := c.claimOne(h, "w1", "q")
	if _, err := h.Fail(c.Ctx, "w1", q.Lease, "boom", 1); err != nil {
		c.Fatalf("Fail: %v", err)
	}
	bo := c.claimOne(h, "w1", "backoff")
	if _, err := h.Fail(c.Ctx, "w1", bo.Lease, "boom", 5); err != nil {
		c.Fatalf("Fail: %v", err)
	}
	held := c.claimOne(h, "w1", "healthy")
	for _, k := range []string{"q", "backoff"} {
		changed, err := h.Retry(c.Ctx, k)
		if err != nil || !changed {
			c.Errorf("Retry(%s) = %v, %v; want true", k, changed, err)
		}
	}
	if changed, err := h.Retry(c.Ctx, "healthy"); err != nil || changed {
		c.Errorf("Retry of a held, healthy partition = %v, %v; want false", changed, err)
	}
	c.wantKeys("candidates after retries", candKeys(c.candidates(h, 10)), []string{"q", "backoff"})
	if n := c.load(h).Quarantined; n != 0 {
		c.Errorf("quarantined after retry: %d", n)
	}
	if v, _, _ := h.Progress(c.Ctx, "healthy"); v != held.Version {
		c.Errorf("retry of a held partition moved it to v%d", v)
	}
	// Attempts start again from zero.
	l := c.claimOne(h, "w1", "backoff")
	if r, err := h.Fail(c.Ctx, "w1", l.Lease, "boom", 5); err != nil || r.Attempts != 1 {
		c.Errorf("first failure after a retry: %+v, %v; want attempt 1", r, err)
	}
}

func progress(c *C, h Harness) {
	h.AddPartition("a", 5)
	v0, p0, err := h.Progress(c.Ctx, "a")
	c.must(err, "Progress")
	if p0 != 0 {
		c.Errorf("position of a new partition: %d", p0)
	}
	a := c.claimOne(h, "w1", "a")
	if a.Version <= v0 {
		c.Errorf("claim at v%d, not above the v%d read before", a.Version, v0)
	}
	b, _, err := h.Begin(c.Ctx, "w1", a.Lease)
	c.must(err, "Begin")
	c.must(b.Advance(c.Ctx, 0, 2), "Advance")
	// Uncommitted progress is not visible.
	if _, p, _ := h.Progress(c.Ctx, "a"); p != 0 {
		c.Errorf("uncommitted position visible: %d", p)
	}
	c.must(b.Commit(c.Ctx), "Commit")
	if v, p, err := h.Progress(c.Ctx, "a"); err != nil || v != a.Version || p != 2 {
		c.Errorf("Progress = v%d %d, %v; want v%d 2", v, p, err, a.Version)
	}
}

func fairShareLoad(c *C, h Harness) {
	h.AddPartition("pending", 5)
	h.AddPartition("held", 5)
	h.AddPartition("heldDone", 2)
	h.AddPartition("idle", 0)
	h.AddPartition("quarantined", 5)
	h.AddPartition("backingOff", 5)
	_, err := h.HeartbeatBelow(c.Ctx, "w1", 0, nil)
	c.must(err, "Heartbeat")
	held := c.claimOne(h, "w1", "held")
	d := c.claimOne(h, "w1", "heldDone")
	b, _, err := h.Begin(c.Ctx, "w1", d.Lease)
	c.must(err, "Begin")
	c.must(b.Advance(c.Ctx, 0, 2), "Advance")
	c.must(b.Commit(c.Ctx), "Commit")
	q := c.claimOne(h, "w1", "quarantined")
	if _, err := h.Fail(c.Ctx, "w1", q.Lease, "boom", 1); err != nil {
		c.Fatalf("Fail: %v", err)
	}
	bo := c.claimOne(h, "w1", "backingOff")
	if _, err := h.Fail(c.Ctx, "w1", bo.Lease, "boom", 5); err != nil {
		c.Fatalf("Fail: %v", err)
	}
	// The heartbeat counts what w1 holds: held and heldDone.
	_, err = h.HeartbeatBelow(c.Ctx, "w1", 0, []partition.Lease{held.Lease, d.Lease})
	c.must(err, "Heartbeat")
	got := c.load(h)
	// Busy: held, heldDone (held under a live lease), pending
	// (claimable); not idle, not quarantined, not backingOff (not
	// claimable yet). Unclaimed: pending only. Quarantined is not counted.
	// Backlog: held's and pending's 5 items each.
	want := taskstore.Load{Busy: 3, LiveWorkers: 1, Unclaimed: 1, MinHeld: 2, Backlog: 10}
	if got != want {
		c.Errorf("FairShareLoad = %+v, want %+v", got, want)
	}
	if n, err := h.QuarantinedCount(c.Ctx); err != nil || n != 1 {
		c.Errorf("QuarantinedCount = %d, %v; want 1", n, err)
	}
	// heldDone's lease ends and w1's heartbeat no longer lists it: handed
	// back, caught up, so no longer busy.
	h.ExpireLease("heldDone")
	_, err = h.HeartbeatBelow(c.Ctx, "w1", 0, []partition.Lease{held.Lease})
	c.must(err, "Heartbeat")
	want.Busy, want.MinHeld = 2, 1
	if got := c.load(h); got != want {
		c.Errorf("FairShareLoad after a caught-up lease was handed back = %+v, want %+v", got, want)
	}
}

func fairShareMinHeld(c *C, h Harness) {
	for _, k := range []string{"a", "b", "c"} {
		h.AddPartition(k, 5)
	}
	if m := c.load(h).MinHeld; m != 0 {
		c.Errorf("MinHeld with no workers: %d", m)
	}
	for _, w := range []string{"w1", "w2", "w3"} {
		_, err := h.HeartbeatBelow(c.Ctx, w, 0, nil)
		c.must(err, "Heartbeat")
	}
	c.claimOne(h, "w1", "a")
	c.claimOne(h, "w1", "b")
	cc := c.claimOne(h, "w2", "c")
	if l := c.load(h); l.MinHeld != 0 || l.Busy != 3 || l.LiveWorkers != 3 {
		c.Errorf("FairShareLoad with w3 holding nothing = %+v, want MinHeld 0, Busy 3, 3 live", l)
	}
	c.must(h.StopWorker(c.Ctx, "w3"), "StopWorker")
	if m := c.load(h).MinHeld; m != 1 {
		c.Errorf("MinHeld once w3 stopped: %d, want 1 (w2)", m)
	}
	// w2 says it wants 3 more: counted for the others, not for itself.
	_, err := h.HeartbeatBelow(c.Ctx, "w2", 3, []partition.Lease{cc.Lease})
	c.must(err, "Heartbeat")
	if l, err := h.FairShareLoad(c.Ctx, "w1"); err != nil || l.Wanted != 3 {
		c.Errorf("FairShareLoad for w1 = %+v, %v; want Wanted 3 (w2's)", l, err)
	}
	if l, err := h.FairShareLoad(c.Ctx, "w2"); err != nil || l.Wanted != 0 {
		c.Errorf("FairShareLoad for w2 = %+v, %v; want Wanted 0", l, err)
	}
	// w1 stops holding a and b: its live leases still count as busy
	// (leaving), not as held by a live worker.
	c.must(h.StopWorker(c.Ctx, "w1"), "StopWorker")
	if l := c.load(h); l.LiveWorkers != 1 || l.Busy != 3 || l.MinHeld != 1 {
		c.Errorf("FairShareLoad once w1 stopped holding two = %+v, want 1 live, Busy 3, MinHeld 1", l)
	}
	// w2's lease ended and its heartbeat does not list it: handed back,
	// claimable.
	h.ExpireLease("c")
	_, err = h.HeartbeatBelow(c.Ctx, "w2", 0, nil)
	c.must(err, "Heartbeat")
	if l := c.load(h); l.MinHeld != 0 || l.Unclaimed != 1 {
		c.Errorf("FairShareLoad once w2's lease was handed back = %+v, want MinHeld 0, Unclaimed 1", l)
	}
}

// The backlog (pending items) follows what the workers hold: raised by a
// claim, rewritten by a heartbeat, lowered by a release, and counted for
// claimable rows and a stopped worker's leases.
func fairShareBacklog(c *C, h Harness) {
	h.AddPartition("a", 5)
	h.AddPartition("b", 7)
	for _, w := range []string{"w1", "w2"} {
		_, err := h.HeartbeatBelow(c.Ctx, w, 0, nil)
		c.must(err, "Heartbeat")
	}
	check := func(step, self string, backlog, selfBacklog int64) {
		l, err := h.FairShareLoad(c.Ctx, self)
		c.must(err, "FairShareLoad")
		if l.Backlog != backlog || l.SelfBacklog != selfBacklog {
			c.Errorf("%s: FairShareLoad for %s = %+v, want Backlog %d, SelfBacklog %d", step, self, l, backlog, selfBacklog)
		}
	}
	check("nothing held", "w1", 12, 0)
	a := c.claimOne(h, "w1", "a")
	check("a claimed by w1", "w1", 12, 5)
	check("a claimed by w1, read by w2", "w2", 12, 0)
	b, _, err := h.Begin(c.Ctx, "w1", a.Lease)
	c.must(err, "Begin")
	c.must(b.Advance(c.Ctx, 0, 2), "Advance")
	c.must(b.Commit(c.Ctx), "Commit")
	_, err = h.HeartbeatBelow(c.Ctx, "w1", 0, []partition.Lease{a.Lease})
	c.must(err, "Heartbeat")
	check("2 of a's items done, w1 heartbeated", "w1", 10, 3)
	bb := c.claimOne(h, "w2", "b")
	check("b claimed by w2", "w2", 10, 7)
	_, err = h.Release(c.Ctx, "w1", []partition.Lease{a.Lease})
	c.must(err, "Release")
	check("a released", "w1", 10, 0)
	// A stopped worker's live leases still count, as busy.
	c.must(h.StopWorker(c.Ctx, "w2"), "StopWorker")
	check("w2 stopped holding b", "w1", 10, 0)
	_, err = h.Release(c.Ctx, "w2", []partition.Lease{bb.Lease})
	c.must(err, "Release")
	check("b released", "w1", 10, 0)
}

// A row past its lease whose owner is live is not stale: only its owner's
// heartbeat hands it back. Once the owner's registration ends it is.
func staleOwnerLive(c *C, h Harness) {
	h.AddPartition("a", 5)
	_, err := h.HeartbeatBelow(c.Ctx, "w1", 0, nil)
	c.must(err, "Heartbeat")
	a := c.claimOne(h, "w1", "a")
	h.ExpireLease("a")
	st, err := h.StaleCandidates(c.Ctx, 10)
	c.must(err, "StaleCandidates")
	c.wantKeys("stale candidates while the owner is live", candKeys(st), nil)
	c.wantKeys("candidates while the owner is live", candKeys(c.candidates(h, 10)), nil)
	h.ExpireWorker("w1")
	st, err = h.StaleCandidates(c.Ctx, 10)
	c.must(err, "StaleCandidates")
	c.wantKeys("stale candidates once the owner's registration ended", candKeys(st), []string{"a"})
	if len(st) == 1 && (!st[0].Owned || st[0].Version != a.Version) {
		c.Errorf("stale candidate %+v; want owned, at v%d", st[0], a.Version)
	}
}

// The heartbeat rewrites a lease only when it has less than RenewBelow
// left; the others come back Fresh with what they have left.
func heartbeatThreshold(c *C, h Harness) {
	h.AddPartition("a", 5)
	h.AddPartition("b", 5)
	a := c.claimOne(h, "w1", "a")
	b := c.claimOne(h, "w1", "b")
	h.AgeLease("b", RenewBelow-time.Second)
	rs, err := h.HeartbeatBelow(c.Ctx, "w1", 0, []partition.Lease{a.Lease, b.Lease})
	c.must(err, "Heartbeat")
	got := map[string]leaseinfo.Renewal{}
	for _, r := range rs {
		got[r.Key] = r
	}
	if r, ok := got["a"]; !ok || !r.Fresh || r.Remaining < RenewBelow || r.Remaining > TTL {
		c.Errorf("renewal of a fresh lease: %+v; want Fresh with between %s and %s left", r, RenewBelow, TTL)
	}
	if r, ok := got["b"]; !ok || r.Fresh || r.Locked {
		c.Errorf("renewal of a lease below the threshold: %+v; want rewritten", r)
	}
	held, err := h.Inspect(c.Ctx, "w1", []partition.Lease{b.Lease})
	c.must(err, "Inspect")
	if len(held) != 1 || held[0].Remaining < RenewBelow {
		c.Errorf("b after its rewrite: %+v; want more than %s left", held, RenewBelow)
	}
}

// A heartbeat hands back the worker's rows it does not list whose leases
// have ended, and keeps those it does not list with time left.
func heartbeatHandBack(c *C, h Harness) {
	h.AddPartition("a", 5)
	h.AddPartition("b", 5)
	h.AddPartition("c", 5)
	a := c.claimOne(h, "w1", "a")
	b := c.claimOne(h, "w1", "b")
	cc := c.claimOne(h, "w1", "c")
	h.ExpireLease("a")
	_, err := h.HeartbeatBelow(c.Ctx, "w1", 0, []partition.Lease{b.Lease})
	c.must(err, "Heartbeat")
	c.wantProgress(h, "a", a.Version+1, 0)
	c.wantProgress(h, "c", cc.Version, 0)
	cs := c.candidates(h, 10)
	c.wantKeys("candidates after the hand-back", candKeys(cs), []string{"a"})
	if len(cs) == 1 && cs[0].Owned {
		c.Errorf("handed-back candidate %+v; want unowned", cs[0])
	}
}

func (c *C) beginGroup(h Harness, owner string, cands []taskstore.Candidate, limit int) (GroupBatch, []taskstore.Fenced) {
	g, fenced, err := h.BeginGroup(c.Ctx, owner, cands, limit)
	c.must(err, "BeginGroup")
	return g, fenced
}

func fencedKeys(fs []taskstore.Fenced) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Key)
	}
	return out
}

func groupClaims(c *C, h Harness) {
	for _, k := range []string{"d", "c", "b", "a"} {
		h.AddPartition(k, 3)
	}
	g, fenced := c.beginGroup(h, "w1", c.candidates(h, 10), 3)
	c.wantKeys("fenced", fencedKeys(fenced), []string{"a", "b", "c"})
	if len(fenced) != 3 {
		c.Fatalf("fenced %d, want 3", len(fenced))
	}
	var steps []GroupStep
	for i, f := range fenced {
		if f.Checkpoint.Position != 0 || f.Checkpoint.Available != 3 {
			c.Errorf("%s fenced with checkpoint %+v; want position 0 of 3", f.Key, f.Checkpoint)
		}
		to := int64(3)
		if i == 1 {
			to = 1
		}
		steps = append(steps, GroupStep{Candidate: f.Candidate, From: 0, To: to, Release: to == 3})
	}
	leases, err := g.ClaimAdvanceGroup(c.Ctx, steps)
	c.must(err, "ClaimAdvanceGroup")
	c.must(g.Commit(c.Ctx), "Commit")
	if len(leases) != 3 {
		c.Fatalf("leases %v, want 3", leases)
	}
	c.wantProgress(h, "a", fenced[0].Version+2, 3) // claimed and released
	c.wantProgress(h, "b", fenced[1].Version+1, 1) // claimed and kept
	c.wantProgress(h, "c", fenced[2].Version+2, 3)
	c.wantProgress(h, "d", 0, 0)
	if held, err := h.Inspect(c.Ctx, "w1", []partition.Lease{leases[1]}); err != nil || len(held) != 1 {
		c.Errorf("b after the group: %+v, %v; want held by w1", held, err)
	}
}

func groupPassesOver(c *C, h Harness) {
	h.AddPartition("a", 2)
	h.AddPartition("b", 2)
	cands := c.candidates(h, 10)
	var ca taskstore.Candidate
	for _, x := range cands {
		if x.Key == "a" {
			ca = x
		}
	}
	lone, _ := c.beginClaim(h, "w2", ca)
	defer lone.Rollback()
	g, fenced := c.beginGroup(h, "w1", cands, 0)
	defer g.Rollback()
	c.wantKeys("fenced while a is fenced by another claim", fencedKeys(fenced), []string{"b"})
}

func groupRollback(c *C, h Harness) {
	h.AddPartition("a", 2)
	h.AddPartition("b", 2)
	g, fenced := c.beginGroup(h, "w1", c.candidates(h, 10), 0)
	var steps []GroupStep
	for _, f := range fenced {
		steps = append(steps, GroupStep{Candidate: f.Candidate, From: 0, To: 2, Release: true})
	}
	_, err := g.ClaimAdvanceGroup(c.Ctx, steps)
	c.must(err, "ClaimAdvanceGroup")
	g.Rollback()
	c.wantProgress(h, "a", 0, 0)
	c.wantProgress(h, "b", 0, 0)
	c.wantKeys("candidates after the rollback", candKeys(c.candidates(h, 10)), []string{"a", "b"})
}

// A group of held partitions' batches: each member fenced by its own
// claim in one transaction; a member claimed since by another worker
// drops out and the others commit together, at one instant.
func heldGroup(c *C, h Harness) {
	for _, k := range []string{"a", "b", "c"} {
		h.AddPartition(k, 4)
	}
	a, b, old := c.claimOne(h, "w1", "a"), c.claimOne(h, "w1", "b"), c.claimOne(h, "w1", "c")
	_, err := h.Release(c.Ctx, "w1", []partition.Lease{old.Lease})
	c.must(err, "Release")
	cur := c.claimOne(h, "w2", "c")
	g, err := h.BeginHeld(c.Ctx, "w1")
	c.must(err, "BeginHeld")
	for _, m := range []taskstore.Claimed{a, b} {
		cp, err := g.Fence(c.Ctx, m.Lease)
		c.must(err, "Fence of "+m.Key)
		if cp.Position != 0 || cp.Available != 4 {
			c.Errorf("%s fenced at %d of %d, want 0 of 4", m.Key, cp.Position, cp.Available)
		}
	}
	if _, err := g.Fence(c.Ctx, old.Lease); !errors.Is(err, partition.ErrFenced) {
		c.Errorf("Fence of c under w1's released claim: %v, want ErrFenced", err)
	}
	c.must(g.Advance(c.Ctx, a.Lease, 0, 2), "Advance of a")
	c.must(g.Advance(c.Ctx, b.Lease, 0, 4), "Advance of b")
	c.wantProgress(h, "a", a.Version, 0) // not committed yet
	c.must(g.Commit(c.Ctx), "Commit")
	c.wantProgress(h, "a", a.Version, 2)
	c.wantProgress(h, "b", b.Version, 4)
	c.wantProgress(h, "c", cur.Version, 0)
	// c's new owner was never in the way.
	bc, _, err := h.Begin(c.Ctx, "w2", cur.Lease)
	c.must(err, "Begin of c by w2")
	c.must(bc.Advance(c.Ctx, 0, 1), "Advance of c")
	c.must(bc.Commit(c.Ctx), "Commit of c")
	c.wantProgress(h, "c", cur.Version, 1)
}

// A held group rolled back changes nothing, and its members are still
// held: each goes on alone.
func heldGroupRollback(c *C, h Harness) {
	h.AddPartition("a", 2)
	h.AddPartition("b", 2)
	a, b := c.claimOne(h, "w1", "a"), c.claimOne(h, "w1", "b")
	g, err := h.BeginHeld(c.Ctx, "w1")
	c.must(err, "BeginHeld")
	for _, m := range []taskstore.Claimed{a, b} {
		_, err := g.Fence(c.Ctx, m.Lease)
		c.must(err, "Fence of "+m.Key)
		c.must(g.Advance(c.Ctx, m.Lease, 0, 2), "Advance of "+m.Key)
	}
	g.Rollback()
	c.wantProgress(h, "a", a.Version, 0)
	c.wantProgress(h, "b", b.Version, 0)
	for _, m := range []taskstore.Claimed{a, b} {
		bt, cp, err := h.Begin(c.Ctx, "w1", m.Lease)
		c.must(err, "Begin of "+m.Key+" alone")
		if cp.Position != 0 {
			c.Errorf("%s alone fenced at %d, want 0", m.Key, cp.Position)
		}
		c.must(bt.Advance(c.Ctx, 0, 2), "Advance of "+m.Key+" alone")
		c.must(bt.Commit(c.Ctx), "Commit of "+m.Key+" alone")
		c.wantProgress(h, m.Key, m.Version, 2)
	}
}

func stopWorker(c *C, h Harness) {
	for _, w := range []string{"w1", "w2"} {
		_, err := h.HeartbeatBelow(c.Ctx, w, 0, nil)
		c.must(err, "Heartbeat")
	}
	c.must(h.StopWorker(c.Ctx, "w1"), "StopWorker")
	if n := c.load(h).LiveWorkers; n != 1 {
		c.Errorf("live workers after w1 stopped: %d, want 1", n)
	}
	// A late heartbeat (sent before the stop, applied after it) does not
	// bring the worker back.
	_, err := h.HeartbeatBelow(c.Ctx, "w1", 0, nil)
	c.must(err, "late Heartbeat")
	if n := c.load(h).LiveWorkers; n != 1 {
		c.Errorf("live workers after a late heartbeat of the stopped w1: %d, want 1", n)
	}
	c.must(h.StopWorker(c.Ctx, "never-registered"), "StopWorker of an unknown instance")
}

func produce(c *C, h Harness) {
	h.AddPartition("a", 2)
	a := c.claimOne(h, "w1", "a")
	b, _, err := h.Begin(c.Ctx, "w1", a.Lease)
	c.must(err, "Begin")
	c.must(b.Advance(c.Ctx, 0, 2), "Advance")
	c.must(b.Commit(c.Ctx), "Commit")
	if _, err := h.Release(c.Ctx, "w1", []partition.Lease{a.Lease}); err != nil {
		c.Fatalf("Release: %v", err)
	}
	c.wantKeys("candidates when caught up", candKeys(c.candidates(h, 10)), nil)
	h.Produce("a", 3)
	cs := c.candidates(h, 10)
	c.wantKeys("candidates after new work", candKeys(cs), []string{"a"})
	won, err := h.Claim(c.Ctx, "w2", cs)
	c.must(err, "Claim")
	if len(won) != 1 || won[0].Position != 2 || won[0].Available != 5 {
		c.Errorf("claim after new work = %+v; want position 2, available 5", won)
	}
}

// ---- claims made with their first batch ----------------------------------

func (c *C) beginClaim(h Harness, owner string, cand taskstore.Candidate) (ClaimBatch, partition.Checkpoint) {
	b, cp, err := h.BeginClaim(c.Ctx, owner, cand)
	c.must(err, "BeginClaim by "+owner)
	return b, cp
}

func (c *C) wantProgress(h Harness, key string, version, position int64) {
	v, p, err := h.Progress(c.Ctx, key)
	c.must(err, "Progress")
	if v != version || p != position {
		c.Errorf("%s at version %d position %d; want %d, %d", key, v, p, version, position)
	}
}

func claimBatchReleases(c *C, h Harness) {
	h.AddPartition("a", 1)
	cs := c.candidates(h, 10)
	b, cp := c.beginClaim(h, "w1", cs[0])
	defer b.Rollback()
	if cp.Position != 0 || cp.Available != 1 {
		c.Fatalf("fence read %+v; want position 0 of 1", cp)
	}
	l, err := b.ClaimAdvance(c.Ctx, 0, 1, true)
	c.must(err, "ClaimAdvance")
	if l.Version != cs[0].Version+1 {
		c.Errorf("claim's lease %v; want version %d", l, cs[0].Version+1)
	}
	c.must(b.Commit(c.Ctx), "Commit")
	// Claimed (one version) and released (another), caught up.
	c.wantProgress(h, "a", cs[0].Version+2, 1)
	c.wantKeys("candidates after the claim with its only batch", candKeys(c.candidates(h, 10)), nil)
	h.Produce("a", 1)
	c.wantKeys("candidates after more work", candKeys(c.candidates(h, 10)), []string{"a"})
}

func claimBatchKept(c *C, h Harness) {
	h.AddPartition("a", 2)
	cs := c.candidates(h, 10)
	b, _ := c.beginClaim(h, "w1", cs[0])
	defer b.Rollback()
	l, err := b.ClaimAdvance(c.Ctx, 0, 1, false)
	c.must(err, "ClaimAdvance")
	c.must(b.Commit(c.Ctx), "Commit")
	c.wantProgress(h, "a", l.Version, 1)
	held, err := h.Inspect(c.Ctx, "w1", []partition.Lease{l})
	c.must(err, "Inspect")
	if len(held) != 1 || held[0].Remaining <= 0 {
		c.Errorf("inspect of the kept claim = %v; want it held with a live lease", held)
	}
	c.wantKeys("candidates while the claim is held", candKeys(c.candidates(h, 10)), nil)
}

func claimBatchFenceExcludes(c *C, h Harness) {
	h.AddPartition("a", 1)
	cs := c.candidates(h, 10)
	b, _ := c.beginClaim(h, "w1", cs[0])
	defer b.Rollback()
	if b2, _, err := h.BeginClaim(c.Ctx, "w2", cs[0]); !errors.Is(err, taskstore.ErrClaimLost) {
		if b2 != nil {
			b2.Rollback()
		}
		c.Errorf("a second claim transaction's fence = %v; want ErrClaimLost", err)
	}
	won, err := h.Claim(c.Ctx, "w2", cs)
	c.must(err, "Claim")
	c.wantKeys("claimed while fenced by a claim transaction", claimedKeys(won), nil)
	_, err = b.ClaimAdvance(c.Ctx, 0, 1, true)
	c.must(err, "ClaimAdvance")
	c.must(b.Commit(c.Ctx), "Commit")
	c.wantProgress(h, "a", cs[0].Version+2, 1)
}

func claimBatchLost(c *C, h Harness) {
	h.AddPartition("a", 1)
	cs := c.candidates(h, 10)
	won, err := h.Claim(c.Ctx, "w2", cs)
	c.must(err, "Claim")
	c.wantKeys("won", claimedKeys(won), []string{"a"})
	if b, _, err := h.BeginClaim(c.Ctx, "w1", cs[0]); !errors.Is(err, taskstore.ErrClaimLost) {
		if b != nil {
			b.Rollback()
		}
		c.Errorf("fence of a candidate claimed meanwhile = %v; want ErrClaimLost", err)
	}
	// Nor at the new version: the row is owned, a takeover, never claimed
	// this way.
	next := taskstore.Candidate{Key: "a", Version: won[0].Version}
	if b, _, err := h.BeginClaim(c.Ctx, "w1", next); !errors.Is(err, taskstore.ErrClaimLost) {
		if b != nil {
			b.Rollback()
		}
		c.Errorf("fence of an owned row = %v; want ErrClaimLost", err)
	}
	c.wantProgress(h, "a", won[0].Version, 0)
}

func claimBatchRollback(c *C, h Harness) {
	h.AddPartition("a", 1)
	cs := c.candidates(h, 10)
	b, _ := c.beginClaim(h, "w1", cs[0])
	_, err := b.ClaimAdvance(c.Ctx, 0, 1, true)
	c.must(err, "ClaimAdvance")
	b.Rollback()
	c.wantProgress(h, "a", cs[0].Version, 0)
	again := c.candidates(h, 10)
	if len(again) != 1 || again[0] != cs[0] {
		c.Errorf("candidates after a rolled-back claim = %v; want %v", again, cs)
	}
	// And it can be claimed so again.
	b, _ = c.beginClaim(h, "w2", cs[0])
	defer b.Rollback()
	_, err = b.ClaimAdvance(c.Ctx, 0, 1, true)
	c.must(err, "ClaimAdvance after the rollback")
	c.must(b.Commit(c.Ctx), "Commit")
	c.wantProgress(h, "a", cs[0].Version+2, 1)
}

// ---- kinds ------------------------------------------------------------

// otherKind is the kind the kind cases set beside the default one.
const otherKind = "other"

// kindCandidates: partitions of another kind with the same keys, claimable
// or stale, are never the store's candidates, nor its own the other's.
func kindCandidates(c *C, h Harness) {
	k := h.(Kinds)
	other := k.OfKind(otherKind)
	h.AddPartition("a", 5)
	h.AddPartition("b", 5)
	h.AddPartition("dead", 5)
	k.AddPartitionOfKind(otherKind, "a", 5)
	k.AddPartitionOfKind(otherKind, "c", 5)
	k.AddPartitionOfKind(otherKind, "dead", 5)
	k.AddPartitionOfKind(otherKind, "done", 0)
	c.wantKeys("candidates", candKeys(c.candidates(h, 10)), []string{"a", "b", "dead"})
	oc, err := other.Candidates(c.Ctx, 10)
	c.must(err, "the other kind's Candidates")
	c.wantKeys("the other kind's candidates", candKeys(oc), []string{"a", "c", "dead"})
	// A dead owner in each kind: each kind's stale candidates are its own.
	c.claimOne(h, "w1", "dead")
	for _, x := range oc {
		if x.Key == "dead" {
			won, err := other.Claim(c.Ctx, "o1", []taskstore.Candidate{x})
			c.must(err, "the other kind's Claim")
			c.wantKeys("won by the other kind", claimedKeys(won), []string{"dead"})
		}
	}
	// Only the store's lease has expired so far.
	h.ExpireLease("dead")
	ost, err := other.StaleCandidates(c.Ctx, 10)
	c.must(err, "the other kind's StaleCandidates")
	c.wantKeys("the other kind's stale candidates while its lease lasts", candKeys(ost), nil)
	k.ExpireLeaseOfKind(otherKind, "dead")
	st, err := h.StaleCandidates(c.Ctx, 10)
	c.must(err, "StaleCandidates")
	if len(st) != 1 || st[0].Key != "dead" {
		c.Fatalf("stale candidates = %v; want dead", st)
	}
	ost, err = other.StaleCandidates(c.Ctx, 10)
	c.must(err, "the other kind's StaleCandidates")
	if len(ost) != 1 || ost[0].Key != "dead" {
		c.Fatalf("the other kind's stale candidates = %v; want dead", ost)
	}
	// Claimed by the store's takeover, the other kind's dead row is still
	// stale and its own.
	won, err := h.Claim(c.Ctx, "w2", st)
	c.must(err, "Claim")
	c.wantKeys("takeover", claimedKeys(won), []string{"dead"})
	ost, err = other.StaleCandidates(c.Ctx, 10)
	c.must(err, "the other kind's StaleCandidates")
	c.wantKeys("the other kind's stale candidates after the store's takeover", candKeys(ost), []string{"dead"})
	c.wantKeys("the other kind's candidates", candKeys(func() []taskstore.Candidate {
		cs, err := other.Candidates(c.Ctx, 10)
		c.must(err, "the other kind's Candidates")
		return cs
	}()), []string{"a", "c", "dead"})
}

// kindClaim: a claim compares the kind as well as the version: candidates
// read in one kind win nothing in another, even at the same key and
// version, and a win moves only the store's own kind's row.
func kindClaim(c *C, h Harness) {
	k := h.(Kinds)
	other := k.OfKind(otherKind)
	h.AddPartition("a", 5)
	h.AddPartition("b", 5)
	k.AddPartitionOfKind(otherKind, "a", 3)
	k.AddPartitionOfKind(otherKind, "c", 3)
	mine := c.candidates(h, 10)
	// The other kind claiming the store's candidates: its own a (same key,
	// same version) only, with its own work; never b, which it lacks.
	won, err := other.Claim(c.Ctx, "o1", mine)
	c.must(err, "the other kind's Claim")
	if len(won) != 1 || won[0].Key != "a" || won[0].Available != 3 {
		c.Fatalf("the other kind's claim of the store's candidates won %+v; want its own a (3 items) only", won)
	}
	for _, x := range mine {
		if v, _, err := h.Progress(c.Ctx, x.Key); err != nil || v != x.Version {
			c.Errorf("the store's %s after the other kind's claim: v%d, %v; want unchanged v%d", x.Key, v, err, x.Version)
		}
	}
	c.wantKeys("candidates after the other kind's claim", candKeys(c.candidates(h, 10)), []string{"a", "b"})
	// The store's own claim wins its rows, a included, with its own work.
	won, err = h.Claim(c.Ctx, "w1", mine)
	c.must(err, "Claim")
	c.wantKeys("won by the store", claimedKeys(won), []string{"a", "b"})
	for _, x := range won {
		if x.Available != 5 {
			c.Errorf("the store won %+v; want its own rows (5 items)", x)
		}
	}
	oc, err := other.Candidates(c.Ctx, 10)
	c.must(err, "the other kind's Candidates")
	c.wantKeys("the other kind's candidates after the store's claims", candKeys(oc), []string{"c"})
}

// SegmentsHeldByOthers sums the pending items, as of their last commits,
// of the given partitions' segments held under a live lease by owners
// other than self: not self's, not unowned ones, not another partition's,
// not one whose lease has run out.
func segmentsHeldByOthers(c *C, h Harness) {
	split := func(key string) []string {
		h.AddPartition(key, 30)
		l := c.claimOne(h, "w1", key)
		b, _, err := h.Begin(c.Ctx, "w1", l.Lease)
		c.must(err, "Begin")
		c.must(b.Split(c.Ctx, 0, 30, []taskstore.Segment{{Start: 0, End: 10}, {Start: 10, End: 20}, {Start: 20, End: 30}}), "Split")
		c.must(b.Commit(c.Ctx), "Commit")
		return []string{partition.SegmentKey(key, 0), partition.SegmentKey(key, 10), partition.SegmentKey(key, 20)}
	}
	a, b := split("a"), split("b")
	want := func(what, self string, partitions []string, n int64) {
		if got, err := h.SegmentsHeldByOthers(c.Ctx, self, partitions); err != nil || got != n {
			c.Errorf("SegmentsHeldByOthers %s = %d, %v; want %d", what, got, err, n)
		}
	}
	want("with no segment held", "w1", []string{"a"}, 0)
	s1 := c.claimOne(h, "w2", a[1])
	sb, _, err := h.Begin(c.Ctx, "w2", s1.Lease)
	c.must(err, "Begin segment")
	c.must(sb.Advance(c.Ctx, 10, 15), "Advance segment")
	c.must(sb.Commit(c.Ctx), "Commit segment")
	c.claimOne(h, "w3", a[2])
	c.claimOne(h, "w1", a[0])
	c.claimOne(h, "w2", b[0])
	want("of w2's (5 left) and w3's (10), not w1's own", "w1", []string{"a"}, 15)
	want("of w1's and w3's, not w2's own", "w2", []string{"a"}, 20)
	want("of both partitions", "w3", []string{"a", "b"}, 25)
	want("of the other partition only", "w1", []string{"b"}, 10)
	want("of no partition", "w1", nil, 0)
	h.ExpireLease(a[2])
	want("without a lease that ran out", "w1", []string{"a"}, 5)
}

// PendingWork is exact: any partition with work left counts, unowned,
// owned or backing off, and neither a caught-up nor a quarantined one does.
func pendingWork(c *C, h Harness) {
	want := func(what string, pending bool) {
		if got, err := h.PendingWork(c.Ctx); err != nil || got != pending {
			c.Errorf("PendingWork %s = %v, %v; want %v", what, got, err, pending)
		}
	}
	want("with no partitions", false)
	h.AddPartition("a", 2)
	want("with an unowned partition with work", true)
	a := c.claimOne(h, "w1", "a")
	want("with an owned partition with work", true)
	b, _, err := h.Begin(c.Ctx, "w1", a.Lease)
	c.must(err, "Begin")
	c.must(b.Advance(c.Ctx, 0, 2), "Advance")
	c.must(b.Commit(c.Ctx), "Commit")
	want("with its partition caught up", false)
	h.AddPartition("q", 1)
	q := c.claimOne(h, "w1", "q")
	if _, err := h.Fail(c.Ctx, "w1", q.Lease, "boom", 2); err != nil {
		c.Fatalf("Fail: %v", err)
	}
	want("with a partition backing off", true)
	h.ExpireLease("q") // the back-off is over
	q = c.claimOne(h, "w1", "q")
	if r, err := h.Fail(c.Ctx, "w1", q.Lease, "boom", 2); err != nil || !r.Quarantined {
		c.Fatalf("Fail = %+v, %v; want quarantined", r, err)
	}
	want("with a quarantined partition only", false)
}

// pauseCase: a paused partition is neither a candidate (unowned or stale)
// nor claimed, by a claim, a claim with its first batch or a takeover, nor
// counted as claimable in the fair share; its owner's heartbeat reports it
// paused (and still its owner's); resumed, it is claimable again.
func pauseCase(c *C, h Harness) {
	h.AddPartition("a", 5)
	h.AddPartition("b", 5)
	h.AddPartition("held", 5)
	h.AddPartition("dead", 5)
	held := c.claimOne(h, "w1", "held")
	c.claimOne(h, "w9", "dead")
	h.ExpireLease("dead")
	h.ExpireWorker("w9")
	cands := c.candidates(h, 10)
	c.wantKeys("candidates before pausing", candKeys(cands), []string{"a", "b", "dead"})
	for _, k := range []string{"a", "held", "dead"} {
		h.Pause(k)
	}
	c.wantKeys("candidates while paused", candKeys(c.candidates(h, 10)), []string{"b"})
	st, err := h.StaleCandidates(c.Ctx, 10)
	c.must(err, "StaleCandidates")
	c.wantKeys("stale candidates while paused", candKeys(st), nil)
	if n := c.load(h).Unclaimed; n != 1 {
		c.Errorf("fair share counts %d unclaimed; want 1 (b)", n)
	}
	// A read made before the pause wins nothing paused.
	var paused []taskstore.Candidate
	for _, cd := range cands {
		if cd.Key != "b" {
			paused = append(paused, cd)
		}
	}
	won, err := h.Claim(c.Ctx, "w2", paused)
	c.must(err, "Claim")
	if len(won) != 0 {
		c.Errorf("claims of paused partitions won %+v", won)
	}
	for _, cd := range paused {
		if cd.Owned {
			continue
		}
		b, _, err := h.BeginClaim(c.Ctx, "w2", cd)
		if err == nil {
			b.Rollback()
			c.Errorf("claim with a first batch fenced the paused %s", cd.Key)
		}
	}
	rs, err := h.HeartbeatBelow(c.Ctx, "w1", 0, []partition.Lease{held.Lease})
	c.must(err, "Heartbeat")
	if len(rs) != 1 || !rs[0].Paused {
		c.Errorf("heartbeat of the paused, held partition = %+v; want it still held, Paused", rs)
	}
	for _, k := range []string{"a", "held", "dead"} {
		h.Resume(k)
	}
	rs, err = h.HeartbeatBelow(c.Ctx, "w1", 0, []partition.Lease{held.Lease})
	c.must(err, "Heartbeat")
	if len(rs) != 1 || rs[0].Paused {
		c.Errorf("heartbeat after the resume = %+v; want not Paused", rs)
	}
	c.wantKeys("candidates after resuming", candKeys(c.candidates(h, 10)), []string{"a", "b", "dead"})
	won, err = h.Claim(c.Ctx, "w2", c.candidates(h, 10))
	c.must(err, "Claim")
	c.wantKeys("claims after resuming", claimedKeys(won), []string{"a", "b", "dead"})
}
