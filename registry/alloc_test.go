package registry_test

import (
	"context"
	"testing"
)

// redsync's acquire and release make no more allocations watched than
// unwatched, with or without a watchdog: the hook classifies them without
// allocating, and the lock's record comes out of a block (a fraction of an
// allocation per lock, which AllocsPerRun's whole count rounds away).
func TestRedsyncLockAllocatesNothingMore(t *testing.T) {
	ctx := context.Background()
	allocs := map[string]float64{}
	for _, mode := range redsyncModes {
		c, reg := clientFor(t, answeredClient, mode)
		mutexes := benchMutexes(c)
		i := 0
		allocs[mode] = testing.AllocsPerRun(4096, func() {
			m := mutexes[i%len(mutexes)]
			i++
			if err := m.LockContext(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := m.UnlockContext(ctx); err != nil {
				t.Fatal(err)
			}
		})
		if reg != nil {
			if n := len(reg.Locks()); n != 0 {
				t.Errorf("%s: %d locks tracked after every mutex was unlocked, want 0", mode, n)
			}
		}
	}
	for _, mode := range []string{"watched", "watched+watchdog"} {
		if allocs[mode] != allocs["unwatched"] {
			t.Errorf("redsync Lock+Unlock, %s: %v allocations, unwatched %v: want the same", mode, allocs[mode], allocs["unwatched"])
		}
	}
}
