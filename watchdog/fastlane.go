package watchdog

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/registry"
)

// The fast lane renews, between ticks, the locks whose TTL would fall below
// a third before the next tick: one goroutine and one timer for all of them,
// never one per lock. Each such lock is renewed when a third of its TTL has
// passed since Redis last confirmed it (a sixth earlier at most, so that
// locks due close together share a pipeline). Locks whose renewal failed
// wait here for their retry.

// fastLane is the fast lane's goroutine.
func (w *Watchdog) fastLane() {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		if wake, ok := w.nextWake(); ok {
			timer.Reset(time.Until(wake))
		}
		select {
		case <-w.ctx.Done():
			timer.Stop()
			return
		case <-w.poke:
			timer.Stop()
		case <-timer.C:
			w.runFast(time.Now())
		}
	}
}

// wake asks the fast lane to plan again.
func (w *Watchdog) wake() {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// wakeFor wakes the fast lane only if a lock due at due would otherwise
// wait past the armed timer, so that a burst of obtains does not make the
// fast lane re-plan once per lock. Called with w.mu held.
func (w *Watchdog) wakeFor(due time.Time) {
	if w.armed.IsZero() || due.Before(w.armed) {
		w.armed = due // until the fast lane re-arms: later newcomers need no wake
		w.wake()
	}
}

// due is when the fast lane should next look at l: to renew it, to retry
// a failed renewal (promptly, however much TTL the lock has left, so that a
// failed chunk does not wait for the next tick), to give it up when a retry
// is pending and its TTL since the last confirmation is over, or to end it
// at max hold.
func (w *Watchdog) due(l registry.Lock, retryAt time.Time) time.Time {
	d := l.ConfirmedAt.Add(l.TTL / 3)
	if !retryAt.IsZero() {
		d = retryAt
		if end := l.ConfirmedAt.Add(l.TTL); end.Before(d) {
			d = end
		}
	}
	if w.o.maxHold > 0 {
		if end := l.ObtainedAt.Add(w.o.maxHold); end.Before(d) {
			d = end
		}
	}
	return d
}

// nextWake returns the earliest due time in the fast lane and records it
// as armed.
func (w *Watchdog) nextWake() (time.Time, bool) {
	w.plans.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for r, retryAt := range w.fast {
		l, ok := w.reg.Get(r.c, r.key)
		if !ok {
			delete(w.fast, r)
			continue
		}
		if d := w.due(l, retryAt); first.IsZero() || d.Before(first) {
			first = d
		}
	}
	w.armed = first
	return first, !first.IsZero()
}

// runFast renews the fast-lane locks that are due at now.
func (w *Watchdog) runFast(now time.Time) {
	plan := make(map[redis.UniversalClient][]registry.Ref)
	var expired []registry.Lock
	held := make(map[redis.UniversalClient][]registry.Ref)
	w.mu.Lock()
	for r, retryAt := range w.fast {
		l, ok := w.reg.Get(r.c, r.key)
		switch {
		case !ok:
			delete(w.fast, r)
		case w.pastMaxHold(l, now):
			held[r.c] = append(held[r.c], registry.Ref{Key: l.Key, Value: l.Value})
		case !retryAt.IsZero() && !now.Before(l.ConfirmedAt.Add(l.TTL)):
			expired = append(expired, l)
		case w.o.filter != nil && !w.o.filter(l):
			delete(w.fast, r)
		case !now.Before(retryAt) && !now.Add(l.TTL/6).Before(w.due(l, retryAt)):
			plan[r.c] = append(plan[r.c], registry.Ref{Key: l.Key, Value: l.Value, TTL: l.TTL})
		}
	}
	w.mu.Unlock()
	for c, refs := range held {
		w.endHold(c, refs)
	}
	for _, l := range expired {
		w.lose(l.Client, registry.Ref{Key: l.Key, Value: l.Value}, errNoConfirmation)
	}
	if len(plan) > 0 {
		w.sweep(w.ctx, now, plan)
	}
}

// onEvent puts newly obtained or refreshed locks that need it into the fast
// lane and takes released ones out. It runs on the application's goroutine,
// inside the registry hook: it must stay quick.
func (w *Watchdog) onEvent(ev registry.Event) {
	l := ev.Lock
	r := lockRef{l.Client, l.Key}
	switch ev.Kind {
	case registry.EventObtained, registry.EventRefreshed:
		if w.o.filter != nil && !w.o.filter(l) {
			return
		}
		if !needsFast(l.TTL, l.ConfirmedAt, w.sched.Next(l.ConfirmedAt)) {
			return
		}
		w.mu.Lock()
		w.fast[r] = time.Time{}
		w.wakeFor(w.due(l, time.Time{}))
		w.mu.Unlock()
	default:
		w.mu.Lock()
		delete(w.fast, r)
		w.mu.Unlock()
	}
}

// adoptTracked puts the locks tracked before Attach that need it into the
// fast lane.
func (w *Watchdog) adoptTracked(now time.Time) {
	next := w.sched.Next(now)
	var refs []lockRef
	for _, c := range w.reg.Clients() {
		w.reg.Range(c, func(l registry.Lock) bool {
			if needsFast(l.TTL, l.ConfirmedAt, next) {
				refs = append(refs, lockRef{c, l.Key})
			}
			return true
		})
	}
	w.mu.Lock()
	for _, r := range refs {
		w.fast[r] = time.Time{}
	}
	w.mu.Unlock()
}
