package watchdog

import (
	"cmp"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// tellUnconfirmed tells the holders of es, locks of lane l that no renewal
// confirmed before their tell time, that they may be lost: the contexts
// following them are cancelled with ErrUnconfirmed, before their keys may
// expire on the server (I15). The locks stay tracked and renewed: an
// answer that confirms one later keeps it held until its holder releases
// it, and only a lock really lost is reported to OnLost. A copy of a
// lock over several servers tells only when fewer copies than its quorum
// are still confirmed in time (the quorum-th copy's tell time).
func (w *Watchdog) tellUnconfirmed(l *lane, es []*table.Entry) {
	if len(es) == 0 {
		return
	}
	l.mu.Lock()
	last := cmp.Or(l.cause, l.lastErr)
	if !l.down && !l.hedging {
		last = nil // its renewals are late, not failing
	}
	l.mu.Unlock()
	t := l.c.t
	told, first := 0, ""
	var firstExpiry time.Time
	for _, e := range es {
		if g := w.set.GroupOf(e); g != nil && !w.groupUnconfirmed(g, l.tellLagNs.Load()) {
			continue
		}
		t.Lock()
		expires := w.set.At(expiry(e))
		t.Unlock()
		if told == 0 {
			first, firstExpiry = e.Key, expires
		}
		told++
		w.contexts.end(e.Key, e.Value, &UnconfirmedError{Endpoint: l.name, Expiry: expires, Err: last})
	}
	if told == 0 {
		return
	}
	w.unconfirmed.Add(int64(told))
	l.unconfirmed.Add(int64(told))
	// One line for the locks told together (a call's, or a schedule's
	// worth), not one a lock.
	w.o.logger.Warn("watchdog: no renewal confirmed in time; the locks may be lost, their contexts are cancelled",
		"endpoint", l.name, "locks", told, "key", first, "may_expire_at", firstExpiry, "err", last)
}

// groupUnconfirmed reports whether fewer of g's copies than its quorum are
// still confirmed before their tell time, for a scheduler lagging by lag;
// then every copy is marked told, so that the lock is told once.
func (w *Watchdog) groupUnconfirmed(g *table.Group, lag int64) bool {
	copies, quorum := w.set.Copies(g)
	now := w.set.Since(time.Now())
	alive := 0
	for _, c := range copies {
		c.T.Lock()
		if !c.E.Detached() && tellAt(c.E, lag) > now {
			alive++
		}
		c.T.Unlock()
	}
	if alive >= quorum {
		return false
	}
	for _, c := range copies {
		c.T.Lock()
		c.T.TellLocked(c.E)
		c.T.Unlock()
	}
	return true
}
