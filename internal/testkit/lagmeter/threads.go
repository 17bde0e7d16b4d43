package lagmeter

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// threadWaits follows, for each thread of this process, how long it has
// waited for a CPU without running: a thread whose wait in the kernel's
// run queue grew over a sample's interval while its CPU time did not is
// stalled, with whatever goroutine it was running and whatever lock that
// goroutine holds, and its stall goes on over the intervals after it
// while that holds. A thread that sleeps (blocked in the kernel, neither
// running nor runnable) is not stalled.
type threadWaits struct {
	read  func() map[string]threadTimes
	last  map[string]threadTimes
	stall map[string]time.Duration // per thread: how long it has been stalled so far
}

// threadTimes is a thread's total time on a CPU and waiting for one.
type threadTimes struct{ ran, waited time.Duration }

func newThreadWaits(read func() map[string]threadTimes) *threadWaits {
	t := &threadWaits{read: read, stall: map[string]time.Duration{}}
	t.last = read()
	return t
}

// sample reads the threads' times and returns the longest stall a thread
// is in, or has just ended (0 when none, or nothing can be read).
func (t *threadWaits) sample() time.Duration {
	now := t.read()
	var worst time.Duration
	for tid, cur := range now {
		prev, known := t.last[tid]
		if !known {
			continue
		}
		waited, ran := cur.waited-prev.waited, cur.ran-prev.ran
		// Only an interval it spent waiting without running counts: one
		// in which it also ran may have had its wait before its run.
		stall := time.Duration(0)
		if ran == 0 && waited > 0 {
			stall = t.stall[tid] + waited
		}
		t.stall[tid] = stall
		worst = max(worst, stall)
	}
	for tid := range t.stall {
		if _, ok := now[tid]; !ok {
			delete(t.stall, tid)
		}
	}
	t.last = now
	return worst
}

// readSchedstat reads /proc/self/task/<tid>/schedstat for each thread of
// this process: its time on a CPU and its time waiting for one, in
// nanoseconds (Linux only; nil elsewhere).
func readSchedstat() map[string]threadTimes {
	dirs, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	out := make(map[string]threadTimes, len(dirs))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", d.Name(), "schedstat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		ran, err1 := strconv.ParseInt(f[0], 10, 64)
		waited, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out[d.Name()] = threadTimes{ran: time.Duration(ran), waited: time.Duration(waited)}
	}
	return out
}
