package watchdog

import (
	"math"
	"runtime/metrics"
	"sync"
	"time"
)

// runWaitEvery is how often runWait reads the runtime's histogram at
// most.
const runWaitEvery = 20 * time.Millisecond

// runWait is how long this process's goroutines have lately waited,
// runnable, for a turn on a CPU (the runtime's /sched/latencies:seconds,
// its 99th percentile between two reads, the largest seen fading by
// 1/lagMemory of the time since). The scheduler's own lag does not show
// it: a goroutine woken by another runs next, while those that write
// the renew calls and read their answers, woken by the network, wait
// behind every goroutine that wants the CPU (CI run 24, GOMAXPROCS=1 and
// four spinning goroutines: the scheduler ran on time while answers took
// up to 194 ms to be read).
type runWait struct {
	mu    sync.Mutex
	s     []metrics.Sample
	prev  []uint64
	at    time.Time
	value time.Duration
}

// get returns the recent wait at now, reading the histogram when the
// last read is runWaitEvery old.
func (g *runWait) get(now time.Time) time.Duration {
	if noRunWait.Load() {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.at.IsZero() && now.Sub(g.at) < runWaitEvery {
		return g.value
	}
	if g.s == nil {
		g.s = []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	}
	metrics.Read(g.s)
	if g.s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := g.s[0].Value.Float64Histogram()
	p99 := time.Duration(0)
	if len(g.prev) == len(h.Counts) {
		var total uint64
		for i, c := range h.Counts {
			total += c - g.prev[i]
		}
		if total > 0 {
			want, seen := total-total/100, uint64(0)
			for i, c := range h.Counts {
				if seen += c - g.prev[i]; seen >= want {
					if lo := h.Buckets[i]; lo > 0 && !math.IsInf(lo, 0) {
						p99 = time.Duration(lo * float64(time.Second))
					}
					break
				}
			}
		}
	}
	g.prev = append(g.prev[:0], h.Counts...)
	g.value, g.at = max(g.fadedLocked(now), p99), now
	return g.value
}

// peek returns the recent wait at now as get would, without reading the
// histogram: Stats only looks.
func (g *runWait) peek(now time.Time) time.Duration {
	if noRunWait.Load() {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fadedLocked(now)
}

// fadedLocked is the last wait read, faded by 1/lagMemory of the time
// since; g.mu must be held.
func (g *runWait) fadedLocked(now time.Time) time.Duration {
	if g.at.IsZero() {
		return 0
	}
	return max(g.value-now.Sub(g.at)/lagMemory, 0)
}

// lateness is Stats.Lateness at now: the larger of the wake probe's
// lateness and runWait, as the schedulers last read it. It is also the
// lateness the tell times of locks no lane renews yet allow for (a
// cluster slot without a route: tellOrphans), and Context's look: the
// lanes count their own lag as well (passRun.tellLag).
func (w *Watchdog) lateness(now time.Time) time.Duration {
	return max(time.Duration(w.wakeLag.Load()), w.runWait.peek(now))
}

// wakeProbeEvery is how often the wake probe asks to be woken while the
// registry tracks a lock; wakeProbeIdle while it tracks none. wakeMemory
// is how long it remembers a lateness.
const (
	wakeProbeEvery = 10 * time.Millisecond
	wakeProbeIdle  = 100 * time.Millisecond
	wakeMemory     = 4 * time.Second
)

// probeWakes measures, until the watchdog stops, how late this process's
// goroutines are woken: a timer asked for every wakeProbeEvery, its
// largest lateness of the last wakeMemory or so (wakeLag). Neither the
// scheduler's lag nor runWait shows a process whose threads the machine
// does not run (other processes want the CPUs): the scheduler's timer
// seldom fires while calls end and kick it, or while a partition leaves
// every call hanging, its lag fades within a tenth of a second, and the
// runtime counts a goroutine whose thread waits for a CPU as running. CI
// runs 27 and 29 (two CPU burners, four test binaries): a partitioned
// holder's scheduler allowed for no lateness and told jobs at E - 13 ms,
// then ran 20-25 ms late, after a contender could take their keys, while
// a 1 ms ticker in the same process had been woken up to 16.5 ms late
// in the second before. A machine that stalled a process lately may stall
// it again: tell times allow for it (passRun.tellLag).
func (w *Watchdog) probeWakes() {
	defer w.loops.Done()
	timer := time.NewTimer(wakeProbeIdle)
	defer timer.Stop()
	var cur, prev time.Duration // the largest lateness of this half of wakeMemory, and of the last
	half := time.Now()
	for {
		every := wakeProbeIdle
		if w.set.AnyHolding() {
			every = wakeProbeEvery
		}
		asked := time.Now()
		timer.Reset(every)
		select {
		case <-w.ctx.Done():
			return
		case <-timer.C:
		}
		now := time.Now()
		if gone := now.Sub(half); gone >= wakeMemory/2 {
			prev = cur
			if gone >= wakeMemory { // idle: this half saw no wake before now
				prev = 0
			}
			cur, half = 0, now
		}
		cur = max(cur, now.Sub(asked)-every)
		w.wakeLag.Store(int64(max(cur, prev)))
	}
}
