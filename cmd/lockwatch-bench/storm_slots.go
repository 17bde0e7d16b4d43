package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockwatch/lockwatch/registry"
)

// instance is one lock the storm obtained: a key held with one value.
type instance struct {
	lock heldLock // nil once retired
	id   string   // idOf its value
	// found has a bit per finder (foundOnLost...) that found it lost.
	found atomic.Uint32
	// releasedHeld is set when its release found it held; heldCounted
	// once it counted as reported lost while held.
	releasedHeld, heldCounted atomic.Bool
}

// Who found a lock lost.
const (
	foundOnLost uint32 = 1 << iota
	foundRelease
	foundPollGone
	foundPollOther
)

// slot is one key of the storm: the lock held on it now, if any. gen
// changes whenever the lock is taken away to be released and when a new
// one is put, so that a poll can tell it judged the lock it read.
type slot struct {
	mu  sync.Mutex
	cur *instance // nil while no lock is held; guarded by mu
	gen uint64    // guarded by mu
}

// take takes the slot's lock away to release it (nil when it holds none).
func (s *slot) take() *instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.cur
	s.cur = nil
	s.gen++
	return in
}

// put makes in the slot's lock.
func (s *slot) put(in *instance) {
	s.mu.Lock()
	s.cur = in
	s.gen++
	s.mu.Unlock()
}

// peek returns the slot's lock and generation.
func (s *slot) peek() (*instance, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, s.gen
}

// stormState is one run's locks and what was found about them.
type stormState struct {
	keys  []string
	slots []slot
	lk    locker

	// byID finds an instance by its value's id, for OnLost. It is filled
	// with lockwatch and without alike, so that the bench's own
	// bookkeeping costs both runs the same: filled in the run with
	// lockwatch alone, its 60,000 instances doubled the heap the GC
	// marks in that run, and the GC's work showed in the rise as if it
	// were lockwatch's.
	byID sync.Map

	held, obtainFailed, releaseErrors, lost atomic.Int64
	onLost, release, pollGone, pollOther    atomic.Int64
	onLostHeld, onLostUnknown               atomic.Int64

	// The waves' obtains and releases, each try timed alone (the burst's
	// are not: it runs before the application's streams settle).
	opsMu                 sync.Mutex
	obtainOps, releaseOps []opSample // guarded by opsMu
}

// timed runs f, one try of an obtain or a release, and records it in ops
// when record is set.
func (st *stormState) timed(record bool, ops *[]opSample, f func() error) error {
	t0 := time.Now()
	err := f()
	if record {
		d := time.Since(t0)
		st.opsMu.Lock()
		*ops = append(*ops, opSample{at: t0.UnixNano(), d: d, err: errClass(err)})
		st.opsMu.Unlock()
	}
	return err
}

func newStormState(prefix string, n int, lk locker) *stormState {
	st := &stormState{keys: make([]string, n), slots: make([]slot, n), lk: lk}
	for i := range st.keys {
		st.keys[i] = lockKey(prefix, i)
	}
	return st
}

// mark records that in was found lost by finder.
func (st *stormState) mark(in *instance, finder uint32) {
	for {
		old := in.found.Load()
		if old&finder != 0 {
			return
		}
		if in.found.CompareAndSwap(old, old|finder) {
			if old == 0 {
				st.lost.Add(1)
			}
			st.counter(finder).Add(1)
			return
		}
	}
}

func (st *stormState) counter(finder uint32) *atomic.Int64 {
	switch finder {
	case foundOnLost:
		return &st.onLost
	case foundRelease:
		return &st.release
	case foundPollGone:
		return &st.pollGone
	}
	return &st.pollOther
}

// onLostReport is the watchdog's OnLost.
func (st *stormState) onLostReport(l registry.Lock, _ error) {
	v, ok := st.byID.Load(idOf(l.Value))
	if !ok {
		st.onLostUnknown.Add(1)
		return
	}
	in := v.(*instance)
	st.mark(in, foundOnLost)
	st.reportedHeld(in)
}

// reportedHeld counts in once if OnLost reported it and its release found
// it held, in either order: a false report.
func (st *stormState) reportedHeld(in *instance) {
	if in.releasedHeld.Load() && in.found.Load()&foundOnLost != 0 && in.heldCounted.CompareAndSwap(false, true) {
		st.onLostHeld.Add(1)
	}
}

// obtain obtains slot i's lock, trying again after errors, and puts it;
// in a wave, it times each try.
func (st *stormState) obtain(ctx context.Context, i int, wave bool) {
	for try := 0; try < stormTries; try++ {
		cctx, cancel := context.WithTimeout(ctx, stormCmdTimeout)
		var l heldLock
		err := st.timed(wave, &st.obtainOps, func() (err error) {
			l, err = st.lk.obtain(cctx, st.keys[i])
			return err
		})
		cancel()
		if err == nil {
			in := &instance{lock: l, id: l.id()}
			st.byID.Store(in.id, in)
			st.slots[i].put(in)
			st.held.Add(1)
			return
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	st.obtainFailed.Add(1)
}

// releaseSlot releases slot i's lock, if it holds one, trying again after
// errors, and records whether it was found lost; in a wave, it times each
// try.
func (st *stormState) releaseSlot(ctx context.Context, i int, wave bool) {
	in := st.slots[i].take()
	if in == nil {
		return
	}
	for try := 0; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, stormCmdTimeout)
		var lost bool
		err := st.timed(wave, &st.releaseOps, func() (err error) {
			lost, err = in.lock.release(cctx)
			return err
		})
		cancel()
		if err == nil {
			if lost {
				st.mark(in, foundRelease)
			} else {
				in.releasedHeld.Store(true)
				st.reportedHeld(in)
			}
			break
		}
		if try == stormTries-1 || ctx.Err() != nil {
			st.releaseErrors.Add(1)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	in.lock = nil // the value may be large; the id stays for OnLost
}

// forSlots runs f on each of idx, stormWorkers at a time, and returns how
// long that took.
func forSlots(idx []int, f func(i int)) time.Duration {
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range stormWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= len(idx) {
					return
				}
				f(idx[k])
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// wave releases the locks of the k-th third (k from 0) and obtains them
// again.
func (st *stormState) wave(ctx context.Context, k int) time.Duration {
	var idx []int
	for i := k % 3; i < len(st.slots); i += 3 {
		idx = append(idx, i)
	}
	return forSlots(idx, func(i int) {
		st.releaseSlot(ctx, i, true)
		st.obtain(ctx, i, true)
	})
}

// all is every slot's index.
func (st *stormState) all() []int {
	idx := make([]int, len(st.slots))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// tally fills run's counts.
func (st *stormState) tally(run *stormRun) {
	run.Held, run.ObtainFailed, run.ReleaseErrors, run.Lost = st.held.Load(), st.obtainFailed.Load(), st.releaseErrors.Load(), st.lost.Load()
	st.opsMu.Lock()
	run.Obtain, run.Release = summarizeOps(st.obtainOps), summarizeOps(st.releaseOps)
	st.opsMu.Unlock()
	run.Found = stormLost{
		OnLost: st.onLost.Load(), Release: st.release.Load(), PollGone: st.pollGone.Load(), PollOther: st.pollOther.Load(),
		OnLostHeld: st.onLostHeld.Load(), OnLostUnknown: st.onLostUnknown.Load(),
	}
}
