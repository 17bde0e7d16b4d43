package watchdog

import (
	"sync"

	"github.com/lockwatch/lockwatch/internal/table"
)

// loss is one lock the watchdog gave up, waiting to be reported.
type loss struct {
	info     table.Info
	reason   error
	endpoint string
}

// reporter calls OnLost for each loss, one at a time and in order, on a
// goroutine of its own that runs only while losses are queued: a slow or
// panicking callback delays later callbacks, never a renewal.
type reporter struct {
	w *Watchdog

	mu      sync.Mutex // guards queue and running
	queue   []loss
	running bool
	idle    *sync.Cond // signalled when the queue runs empty
	wg      sync.WaitGroup
}

func newReporter(w *Watchdog) *reporter {
	r := &reporter{w: w}
	r.idle = sync.NewCond(&r.mu)
	return r
}

// add logs losses at once and queues them for OnLost.
func (r *reporter) add(ls ...loss) {
	if len(ls) == 0 {
		return
	}
	w := r.w
	observed := w.observed()
	w.lossMu.Lock()
	for _, l := range ls {
		w.losses.count(l.reason)
	}
	w.lossMu.Unlock()
	for _, l := range ls {
		w.lost.Add(1)
		if observed {
			lock := lockOf(l.info)
			w.each(func(o Observer) { o.Lost(lock, l.reason) })
		}
		w.o.logger.Warn("watchdog: lock lost", "key", l.info.Key, "source", l.info.Source, "endpoint", l.endpoint, "reason", l.reason)
		if w.set.OnDrop != nil {
			w.set.OnDrop(l.info)
		}
	}
	if w.o.onLost == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queue = append(r.queue, ls...)
	if !r.running {
		r.running = true
		r.wg.Add(1)
		go r.run()
	}
}

func (r *reporter) run() {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		if len(r.queue) == 0 {
			r.queue = nil // let a large backlog's array go
			r.running = false
			r.idle.Broadcast()
			r.mu.Unlock()
			return
		}
		l := r.queue[0]
		r.queue[0] = loss{}
		r.queue = r.queue[1:]
		r.mu.Unlock()
		r.call(l)
	}
}

func (r *reporter) call(l loss) {
	defer func() {
		if p := recover(); p != nil {
			r.w.o.logger.Error("watchdog: OnLost panicked", "key", l.info.Key, "panic", p)
		}
	}()
	r.w.o.onLost(lockOf(l.info), l.reason)
}

// drained returns a channel closed once no loss is queued or being
// reported.
func (r *reporter) drained() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		r.mu.Lock()
		for r.running {
			r.idle.Wait()
		}
		r.mu.Unlock()
		close(ch)
	}()
	return ch
}
