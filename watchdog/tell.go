package watchdog

import (
	"cmp"
	"log/slog"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

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
// It returns the holders told after their lock's tell key (lateTell).
func (w *Watchdog) tellUnconfirmed(l *lane, es []*table.Entry) lateTell {
	if len(es) == 0 {
		return lateTell{}
	}
	return w.tellUnconfirmedOn(l.c.t, l.name, l.tellLagNs.Load(), es, l.tellErr(), &l.unconfirmed)
}

// lateTell is what a tell found of the holders it told after their
// lock's tell key, E minus Redlock's drift allowance (I15's bound: by
// then another process may take the key): how many, the first one's key,
// and the latest by how much.
type lateTell struct {
	n   int
	key string
	by  time.Duration
	// marked counts the locks over several servers that another teller
	// had marked told first: that teller cancels their contexts.
	marked int
}

// tellErr is the error an UnconfirmedError of l's locks carries: its last
// renewal error while it is down or hedging, else nil (its renewals are
// late, not failing).
func (l *lane) tellErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.down && !l.hedging {
		return nil
	}
	return cmp.Or(l.cause, l.lastErr)
}

// tellUnconfirmedOn is tellUnconfirmed for locks of t renewed through
// endpoint (a lane's, or none yet: tellOrphans), marked told (TellLocked)
// by the caller, for a scheduler lagging by lag; last is the endpoint's
// last renewal error, counter (nil: none) the lane's count of locks told.
// The holders told after their lock's tell key (a context cancelled
// then) are counted (ToldLate) and returned.
func (w *Watchdog) tellUnconfirmedOn(t *table.Table, endpoint string, lag int64, es []*table.Entry, last error, counter *atomic.Int64) (late lateTell) {
	if len(es) == 0 {
		return late
	}
	told, first, paused := 0, "", false
	var firstExpiry time.Time
	for _, e := range es {
		if g := w.set.GroupOf(e); g != nil {
			tell, already := w.groupUnconfirmed(g, lag)
			if already {
				late.marked++
			}
			if !tell {
				continue
			}
		}
		if f := tellPause.Load(); f != nil && !paused {
			paused = true
			(*f)() // marked, not cancelled yet
		}
		t.Lock()
		expires := w.set.At(expiry(e))
		key := tellKey(e)
		t.Unlock()
		// Its contexts are cancelled now: the clock is read after the
		// table lock, which may have been held for long (local CI run
		// 241: read before, a tell 150 ms past E counted on time;
		// TestTellCountedLateAfterTableWait).
		by := time.Duration(w.set.Since(time.Now()) - key)
		// Told late: a context following the lock was cancelled after the
		// lock's tell key, by this tell or by a look that found the lock
		// marked (handed over; a lock whose job had ended, its context
		// cancelled by itself, tells nobody).
		ended, handed := w.contexts.endTold(e.Key, e.Value, func() error {
			return &UnconfirmedError{Endpoint: endpoint, Expiry: expires, Err: last}
		})
		if ended == 0 && handed.n == 0 && handed.lost {
			// Lost since it was marked: its holders heard the loss.
			continue
		}
		if told == 0 {
			first, firstExpiry = e.Key, expires
		}
		told++
		lateBy := time.Duration(math.MinInt64)
		if ended > 0 && by > 0 {
			lateBy = by
		}
		if handed.n > 0 && handed.by > 0 {
			lateBy = max(lateBy, time.Duration(handed.by))
		}
		if lateBy > 0 {
			if late.n == 0 {
				late.key = e.Key
			}
			late.n++
			late.by = max(late.by, lateBy)
		}
	}
	if told == 0 {
		return late
	}
	w.unconfirmed.Add(int64(told))
	w.toldLate.Add(int64(late.n))
	if counter != nil {
		counter.Add(int64(told))
	}
	// One line for the locks told together (a call's, or a schedule's
	// worth), not one a lock.
	if !w.logging(slog.LevelWarn) {
		return late
	}
	w.o.logger.Warn("watchdog: no renewal confirmed in time; the locks may be lost, their contexts are cancelled",
		"endpoint", endpoint, "locks", told, "key", first, "may_expire_at", firstExpiry, "err", last)
	return late
}

// groupUnconfirmed reports whether fewer of g's copies than its quorum are
// still confirmed before their tell time, for a scheduler lagging by lag,
// and the lock was not told so yet: then every copy is marked told, so
// that the lock is told once. Two tellers at once (the lanes of two of
// its copies, or a look and a scheduler) take turns (g.Telling), and the
// second finds every copy told as a whole already since Redis last
// confirmed it: the lock is told, and counted, once; already says so.
func (w *Watchdog) groupUnconfirmed(g *table.Group, lag int64) (tell, already bool) {
	copies, quorum := w.set.Copies(g)
	g.Telling.Lock()
	defer g.Telling.Unlock()
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
		return false, false
	}
	live, marked := 0, 0
	for _, c := range copies {
		c.T.Lock()
		if !c.E.Detached() {
			live++
			if c.T.TellGroupLocked(c.E) {
				marked++
			}
		}
		c.T.Unlock()
	}
	if live == 0 || marked < live {
		return true, false
	}
	return false, true
}

// lookUnconfirmed returns the cause a context following the lock key,
// held with one of values, ends with at once: its holder was told its
// lock may be lost, or its tell time has passed with no renewal confirmed
// (an obtain answered late: the registry counts a lock confirmed when its
// obtain was sent; or a scheduler not there yet; a release on its way
// decides instead). nil while the lock is confirmed in time, with when
// that may end (the earliest tell time of the lock's copies, in ns since
// the set's epoch; math.MaxInt64 when none is tracked). A lock over
// several servers is judged by its quorum of copies, as groupUnconfirmed
// does. With tell, a lock whose tell time has passed and whose holders
// were not told yet is told now (tellUnconfirmedOn: every context
// following it is cancelled, and the tell is counted), as its scheduler
// would at that time: a job that asks its context, or its context's
// timer, is answered from the clock, not from when its scheduler runs.
// With a cause from a lock another teller had marked told already, h
// says which lock and its tell key: that teller cancels the lock's
// contexts after marking it (tellUnconfirmedOn), if it has not yet
// (handOver).
func (w *Watchdog) lookUnconfirmed(key string, values []string, tell bool) (next int64, h handOff, cause error) {
	wall := time.Now()
	now, late := w.set.Since(wall), int64(w.lateness(wall))
	next = math.MaxInt64
	for _, t := range w.set.Tables() {
		t.Lock()
		e := t.GetLocked(key)
		if e == nil || !slices.Contains(values, e.Value) || e.Detached() {
			t.Unlock()
			continue
		}
		l := w.laneOf(t, e)
		lag := late
		if l != nil {
			lag = max(lag, l.tellLagNs.Load())
		}
		at := tellAt(e, lag)
		told := t.ToldLocked(e)
		// A release on its way decides, as for the scheduler (visit):
		// its job has ended, and hears how the release went. Looked at
		// again soon, should it fail.
		releasing := e.Busy() && !t.RefreshingLocked(e)
		due := !told && at <= now && !releasing
		if releasing && at <= now {
			at = now + busyRecheck
		}
		g := w.set.GroupOf(e)
		if due && tell && g == nil {
			t.TellLocked(e)
		}
		expires := w.set.At(expiry(e))
		tk := tellKey(e)
		t.Unlock()
		if g != nil {
			var gone bool
			gone, told, at = w.groupDue(g, lag, now)
			due = gone && !told
			told = gone && told
		}
		if !told && !due {
			next = min(next, at)
			continue
		}
		name, lastErr, counter := endpointName(t.Client), error(nil), (*atomic.Int64)(nil)
		if l != nil {
			name, lastErr, counter = l.name, l.tellErr(), &l.unconfirmed
		} else if _, ok := t.Client.(*redis.ClusterClient); ok {
			name += noRoute
		}
		if due && tell {
			if f := lookPause.Load(); f != nil && g != nil {
				(*f)()
			}
			// Another teller may have marked a lock over several servers
			// since groupDue: this look hands its context over to it.
			told = w.tellUnconfirmedOn(t, name, lag, []*table.Entry{e}, lastErr, counter).marked > 0
		}
		if told {
			h = handOff{value: e.Value, tellKey: tk}
		}
		return 0, h, &UnconfirmedError{Endpoint: name, Expiry: expires, Err: lastErr}
	}
	return next, h, nil
}

// handOff is a lock a look found marked told by another teller: its
// value, and its tell key (ns since the set's epoch).
type handOff struct {
	value   string
	tellKey int64
}

// groupDue reports whether fewer of g's copies than its quorum are still
// confirmed before their tell time and not told, for a scheduler lagging
// by lag, at now, and whether any copy was told (groupUnconfirmed marks
// them all); while enough are, it returns when that ends: the tell time of
// the quorum-th copy, latest first. It changes nothing.
func (w *Watchdog) groupDue(g *table.Group, lag, now int64) (gone, told bool, next int64) {
	copies, quorum := w.set.Copies(g)
	var ats []int64
	for _, c := range copies {
		c.T.Lock()
		cTold := c.T.ToldLocked(c.E)
		told = told || cTold
		if at := tellAt(c.E, lag); !c.E.Detached() && !cTold && at > now {
			ats = append(ats, at)
		}
		c.T.Unlock()
	}
	if len(ats) < quorum {
		return true, told, 0
	}
	if quorum < 1 {
		return false, told, math.MaxInt64
	}
	slices.Sort(ats)
	return false, told, ats[len(ats)-quorum]
}

// laneOf returns the lane that renews e, a lock of t, or nil (a cluster
// slot with no route yet, a client the watchdog has not seen); t must be
// locked.
func (w *Watchdog) laneOf(t *table.Table, e *table.Entry) *lane {
	m := w.view.Load()
	if m == nil {
		return nil
	}
	if c := (*m)[t]; c != nil {
		return c.owner(e)
	}
	return nil
}
