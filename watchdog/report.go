package watchdog

import (
	"fmt"
	"sync"

	"github.com/lockwatch/lockwatch/internal/table"
	"github.com/lockwatch/lockwatch/registry"
)

// loss is one lock the watchdog gave up, waiting to be reported.
type loss struct {
	e        *table.Entry // the entry dropped; nil when unknown
	t        *table.Table
	info     table.Info
	reason   error
	endpoint string
}

// CopyObserver is an [Observer] that also learns of the copies of a redsync
// mutex over several servers (Redlock) lost while a majority still holds
// it: the mutex is not lost, and OnLost is not called.
type CopyObserver interface {
	Observer
	// CopyLost: a copy of the lock l, on one server, is gone (reason);
	// held copies are left, quorum of them are needed.
	CopyLost(l registry.Lock, reason error, held, quorum int)
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

// add reports losses: a copy of a lock over several servers that leaves a
// majority holding it is an event, not a loss; the copy that leaves fewer
// loses the whole lock, whose other copies are dropped and which is
// reported once. Each loss is logged at once, cancels the contexts that
// follow the lock, and is queued for OnLost.
func (r *reporter) add(ls ...loss) {
	if len(ls) == 0 {
		return
	}
	w := r.w
	var out []loss
	for _, l := range ls {
		if w.set.OnDrop != nil {
			w.set.OnDrop(l.info)
		}
		if l.e != nil {
			if g := w.set.GroupOf(l.e); g != nil {
				if !w.copyLost(g, l) {
					continue
				}
				l.reason = groupReason(w, g, l.reason)
			}
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return
	}
	observed := w.observed()
	w.lossMu.Lock()
	for _, l := range out {
		w.losses.count(l.reason)
	}
	w.lossMu.Unlock()
	for _, l := range out {
		w.lost.Add(1)
		w.o.logger.Warn("watchdog: lock lost", "key", l.info.Key, "source", l.info.Source, "endpoint", l.endpoint, "reason", l.reason)
		w.contexts.end(l.info.Key, l.info.Value, l.reason)
		if observed {
			lock := lockOf(l.info)
			w.each(func(o Observer) { o.Lost(lock, l.reason) })
		}
	}
	if w.o.onLost == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queue = append(r.queue, out...)
	if !r.running {
		r.running = true
		r.wg.Add(1)
		go r.run()
	}
}

// copyLost takes l's copy out of its group g and reports whether the whole
// lock is lost now (fewer copies than its quorum, or its max hold): then
// its other copies are dropped.
func (w *Watchdog) copyLost(g *table.Group, l loss) bool {
	all := l.reason == ErrMaxHold
	state, rest, held, quorum := w.set.CopyLost(g, l.e, all)
	switch state {
	case table.AlreadyLost:
		return false
	case table.CopyOnly:
		w.o.logger.Warn("watchdog: one copy of a lock over several servers lost; a majority still holds it",
			"key", l.info.Key, "endpoint", l.endpoint, "reason", l.reason, "held", held, "quorum", quorum)
		lock := lockOf(l.info)
		w.each(func(o Observer) {
			if co, ok := o.(CopyObserver); ok {
				co.CopyLost(lock, l.reason, held, quorum)
			}
		})
		return false
	}
	for _, c := range rest {
		c.T.Lock()
		info, dropped := c.T.Drop(c.E)
		c.T.Unlock()
		if dropped {
			w.set.Unlink(c.E)
			if w.set.OnDrop != nil {
				w.set.OnDrop(info)
			}
		}
	}
	return true
}

// groupReason is the reason a lock over several servers is reported lost
// with: its max hold, or its quorum lost, wrapping the last copy's reason.
func groupReason(w *Watchdog, g *table.Group, last error) error {
	if last == ErrMaxHold {
		return ErrMaxHold
	}
	held, quorum, servers := w.set.GroupState(g)
	return &quorumError{held: held, quorum: quorum, servers: servers, last: last}
}

// quorumError is ErrQuorumLost with the counts and the last copy's reason.
type quorumError struct {
	held, quorum, servers int
	last                  error
}

func (e *quorumError) Error() string {
	return fmt.Sprintf("%v: %d of %d servers hold it, %d needed; last copy: %v", ErrQuorumLost, e.held, e.servers, e.quorum, e.last)
}

func (e *quorumError) Is(target error) bool { return target == ErrQuorumLost || target == ErrLost }
func (e *quorumError) Unwrap() error        { return e.last }

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
