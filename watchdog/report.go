package watchdog

import (
	"fmt"
	"log/slog"
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
	dropped  bool // untracked: the registry's subscribers hear of it (EventDropped)
	copyOnly bool // a copy of a lock a majority still holds: no loss, only the drop
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
// reported once. Each loss cancels the contexts that follow the lock at
// once, and is queued to be logged, told to the observers and to OnLost.
func (r *reporter) add(ls ...loss) {
	if len(ls) == 0 {
		return
	}
	w := r.w
	var out []loss
	for i := range ls {
		l := &ls[i]
		l.dropped = true // the registry's subscribers hear of it on the reporting goroutine
		if l.e != nil {
			if g := w.set.GroupOf(l.e); g != nil {
				lost, reason := w.copyLost(g, l.e, l.info, l.endpoint, l.reason)
				if !lost {
					out = append(out, loss{info: l.info, dropped: true, copyOnly: true})
					continue
				}
				l.reason = reason
			}
		}
		out = append(out, *l)
	}
	if len(out) == 0 {
		return
	}
	w.lossMu.Lock()
	for _, l := range out {
		if !l.copyOnly {
			w.losses.count(l.reason)
		}
	}
	w.lossMu.Unlock()
	for _, l := range out {
		if l.copyOnly {
			continue
		}
		w.lost.Add(1)
		w.contexts.endLost(l.info.Key, l.info.Value, l.reason, l.info.Told)
	}
	// The log line and the observers' Lost, like OnLost, are the
	// application's code: they run on the reporting goroutine, so that a
	// slow handler delays no renewal. A lane's scheduler gives a dead
	// endpoint's locks up by the hundred at once; under -race on a loaded
	// machine it spent 119-167 ms logging 200-400 losses while the locks
	// still held on that endpoint waited (TestSlowLoggerDelaysNoRenewal).
	if !w.logging(slog.LevelWarn) && !w.observed() && w.o.onLost == nil && w.set.OnDrop == nil {
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

// copyLost takes e, a copy dropped for reason, out of its group g and
// reports whether the whole lock is lost now (fewer copies than its
// quorum, or its max hold), with the reason to report it with: then its
// other copies are dropped.
func (w *Watchdog) copyLost(g *table.Group, e *table.Entry, info table.Info, endpoint string, reason error) (bool, error) {
	all := reason == ErrMaxHold
	state, rest, held, quorum, servers := w.set.CopyLost(g, e, all)
	switch state {
	case table.AlreadyLost:
		return false, nil
	case table.CopyOnly:
		w.o.logger.Warn("watchdog: one copy of a lock over several servers lost; a majority still holds it",
			"key", info.Key, "endpoint", endpoint, "reason", reason, "held", held, "quorum", quorum, "servers", servers)
		lock := lockOf(info)
		w.each(func(o Observer) {
			if co, ok := o.(CopyObserver); ok {
				co.CopyLost(lock, reason, held, quorum)
			}
		})
		return false, nil
	}
	if !all {
		reason = &quorumError{held: held, quorum: quorum, servers: servers, last: reason}
	}
	w.dropCopies(rest)
	return true, reason
}

// dropCopies drops the copies left of a lock lost as a whole.
func (w *Watchdog) dropCopies(rest []table.Copy) {
	for _, c := range rest {
		c.T.Lock()
		info, dropped := c.T.Drop(c.E)
		c.T.Unlock()
		if dropped {
			w.set.Unlink(c.E)
			w.rep.queueDrop(info)
		}
	}
}

// copyNotHeld learns that the holder's refresh (redsync's Extend) found a
// copy of a lock over several servers not held on one server. While a
// majority still holds the lock nothing else happens; when fewer do, the
// lock is lost: its other copies are dropped (no longer renewed) and the
// contexts following it are cancelled with ErrQuorumLost. OnLost is not
// called: the holder learnt it from its own command, as for a lock on one
// server. told: e was marked told (a teller of the whole lock marks every
// copy) when it ended: the loss cancels the contexts before that teller
// does, and hands the tell over (endLost).
func (w *Watchdog) copyNotHeld(t *table.Table, e *table.Entry, g *table.Group, told bool) {
	state, rest, held, quorum, servers := w.set.CopyLost(g, e, false)
	if state != table.GroupLost {
		return
	}
	w.dropCopies(rest)
	w.o.logger.Warn("watchdog: a lock over several servers lost its majority, as its holder's refresh found",
		"key", e.Key, "held", held, "quorum", quorum, "servers", servers)
	w.contexts.endLost(e.Key, e.Value, &quorumError{held: held, quorum: quorum, servers: servers, last: ErrLost}, told)
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

// call logs a lost lock and tells the observers, tells the registry's
// subscribers of a dropped lock, then OnLost of a lost one; each on the
// reporting goroutine, so that a slow one delays only the reports after
// it, never a renewal.
func (r *reporter) call(l loss) {
	w := r.w
	if !l.copyOnly {
		w.o.logger.Warn("watchdog: lock lost", "key", l.info.Key, "source", l.info.Source, "endpoint", l.endpoint, "reason", l.reason)
		if w.observed() {
			lock := lockOf(l.info)
			w.each(func(o Observer) { o.Lost(lock, l.reason) })
		}
	}
	if l.dropped && w.set.OnDrop != nil {
		w.set.OnDrop(l.info) // the registry recovers its subscribers' panics
	}
	if l.copyOnly || w.o.onLost == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			w.panicked("OnLost", p)
		}
	}()
	w.o.onLost(lockOf(l.info), l.reason)
}

// queueDrop queues the registry's event of a dropped copy.
func (r *reporter) queueDrop(info table.Info) {
	if r.w.set.OnDrop == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queue = append(r.queue, loss{info: info, dropped: true, copyOnly: true})
	if !r.running {
		r.running = true
		r.wg.Add(1)
		go r.run()
	}
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
