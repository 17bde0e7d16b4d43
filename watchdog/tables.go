package watchdog

import (
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// adopt makes sure every watched client that tracks locks has its lanes,
// and queues in the fast lane the locks tracked before they had. A client
// without locks has none: it gets them with its first lock (changed).
func (w *Watchdog) adopt(now time.Time) {
	for _, t := range w.set.Holding() {
		if _, fresh := w.clientOf(t); fresh {
			w.judgeAll(t)
			w.queueFast(t)
		}
	}
}

// clientOf returns t's client, making it when needed; fresh says whether
// it was made now. It returns nil once Stop has begun.
func (w *Watchdog) clientOf(t *table.Table) (c *client, fresh bool) {
	if m := w.view.Load(); m != nil {
		if c := (*m)[t]; c != nil {
			return c, false
		}
	}
	if t.Removed() { // before w.mu: a client retires with its table locked, then takes w.mu
		return nil, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return nil, false
	}
	if c := w.clients[t]; c != nil {
		return c, false
	}
	c = newClient(w, t)
	w.clients[t] = c
	w.publish()
	return c, true
}

// publish makes the hook's view of the clients current. Called with w.mu
// held (or before the watchdog runs).
func (w *Watchdog) publish() {
	m := make(map[*table.Table]*client, len(w.clients))
	for t, c := range w.clients {
		m[t] = c
	}
	w.view.Store(&m)
}

// forget drops a closed client.
func (w *Watchdog) forget(c *client) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.clients[c.t] == c {
		delete(w.clients, c.t)
		w.publish()
	}
}

func (w *Watchdog) clientList() []*client {
	m := w.view.Load()
	if m == nil {
		return nil
	}
	out := make([]*client, 0, len(*m))
	for _, t := range w.set.Tables() { // in Watch order
		if c := (*m)[t]; c != nil {
			out = append(out, c)
		}
	}
	return out
}

// queueFast lists in the fast lane t's locks that cannot wait for the next
// tick and are not listed yet, those the filter accepts: the locks tracked
// before the watchdog saw the client, and the fresh locks a lane's due
// loop lists when the first of them is due (runDue).
func (w *Watchdog) queueFast(t *table.Table) {
	c, _ := w.clientOf(t)
	if c == nil {
		return
	}
	next := w.nextTickNs(w.set.Now())
	t.Walk(func(e *table.Entry) bool { // with the table locked, as queue and filtered want
		if e.Queued() || e.IsReady() {
			return false
		}
		if !needsFast(e.TTL, e.Confirmed, next, tickTolerance) {
			// A fresh lock renewed (a Sweep call) or refreshed since it
			// was marked, that the next tick renews in time: the ticks'
			// now, which pass over fresh locks.
			c.forgetFresh(e)
			return false
		}
		if !w.filtered(t, e) {
			c.queue(e, renewAt(e, 0))
		}
		return false
	}, nil)
}

// changedLocked puts a lock just obtained or refreshed in the fast lane
// when it cannot wait for the next tick. It runs on the application's
// goroutine, inside the registry's hook, with the table locked (the hook
// locks it once for the change and this decision): it is quick and never
// waits for Redis. A client the watchdog has not seen yet (watched after
// Attach) needs its lanes made, which waits for the watchdog's own lock:
// that is left to changedOutside, after the table lock.
func (w *Watchdog) changedLocked(t *table.Table, e *table.Entry) (later bool) {
	m := w.view.Load()
	if m == nil {
		return true
	}
	c := (*m)[t]
	if c == nil {
		return true
	}
	if w.o.filter != nil {
		if _, known := t.VerdictLocked(e); !known {
			return true // the filter is judged with no lock held
		}
	}
	w.changed(c, t, e)
	return false
}

// changedOutside is changedLocked's end for a client seen for the first
// time, or a lock the filter has not judged yet.
func (w *Watchdog) changedOutside(t *table.Table, e *table.Entry) {
	c, _ := w.clientOf(t)
	if c == nil {
		return
	}
	if w.o.filter != nil && !w.judge(t, e) {
		return
	}
	t.Lock()
	w.changed(c, t, e)
	t.Unlock()
}

// changed puts e in c's fast lane when it cannot wait for the next tick
// (on a client with one endpoint, as a fresh lock the lane lists when it
// may first be renewed; see lane.leaveFresh), or makes sure the lane looks
// at it in time when it is listed already; the table must be locked. The
// lane's lock comes after the table's.
func (w *Watchdog) changed(c *client, t *table.Table, e *table.Entry) {
	if e.Detached() {
		return
	}
	queued := e.Queued() || e.IsReady()
	if !queued && !needsFast(e.TTL, e.Confirmed, w.nextTickNs(e.Confirmed), tickTolerance) {
		c.forgetFresh(e) // refreshed to a longer TTL: the ticks renew it (see queueFast)
		return
	}
	due := renewAt(e, 0)
	if queued {
		// Refreshed to a shorter TTL, it may be due before the time its
		// slot in the schedule says: it gets an earlier one, in the wait
		// heap or, ready, in the ready queue (by its new tell time).
		if e.IsReady() {
			if l := c.owner(e); l != nil {
				l.relist(e)
			}
			return
		}
		c.queue(e, due)
		return
	}
	if w.filtered(t, e) {
		return
	}
	if l := c.owner(e); !c.cluster && l != nil && l.leaveFresh(t, e) {
		return
	}
	c.queue(e, due)
}

// endedByHolder is told when the holder ends a lock: the contexts
// following it end, and its lane forgets it. told: it was marked told
// then.
func (w *Watchdog) endedByHolder(t *table.Table, e *table.Entry, how table.End, told bool) {
	w.ended(t, e, how, told)
	w.untracked(t, e)
}

// taken is told when a watched client obtained the key of old, a tracked
// lock, with another value: old's owner lost it. It is reported as any
// loss (contexts cancelled with ErrLockTaken at once, OnLost queued), on
// the goroutine that obtained the key, before its obtain returns.
func (w *Watchdog) taken(t *table.Table, old *table.Entry, info table.Info) {
	name := endpointName(t.Client)
	var l *lane
	if m := w.view.Load(); m != nil {
		if c := (*m)[t]; c != nil {
			if l = c.owner(old); l != nil {
				name = l.name
			}
		}
	}
	w.untracked(t, old)
	if l != nil {
		l.lost.Add(1)
	}
	w.report(loss{e: old, t: t, info: info, reason: ErrLockTaken, endpoint: name})
}

// contended renews e now: its key was obtained with another value through
// another watched client, and the renewal's answer tells whether that was
// e's server (the key taken: reported at once) or another one (renewed).
func (w *Watchdog) contended(t *table.Table, e *table.Entry) {
	m := w.view.Load()
	if m == nil {
		return
	}
	c := (*m)[t]
	if c == nil {
		return
	}
	if l := c.owner(e); l != nil {
		t.Lock()
		if !e.InFlight() && !e.Busy() { // a renewal on its way answers as well
			l.makeUrgent(e, 1)
		}
		t.Unlock()
		l.kickDue()
	}
}

// untracked tells the lane of e, a lock no longer tracked, that it may
// forget it: a fresh lock is forgotten now, one in the due list lazily.
func (w *Watchdog) untracked(t *table.Table, e *table.Entry) {
	var c *client
	t.Lock()
	queued, fresh, empty := e.Queued(), e.Fresh(), t.LenLocked() == 0
	if queued || fresh || empty { // most releases are of locks in neither: no lookup
		if m := w.view.Load(); m != nil {
			c = (*m)[t]
		}
	}
	if fresh && c != nil && !c.cluster {
		if l := c.owner(e); l != nil {
			l.forgetFresh(e) // never listed: nothing to drop later
		}
	}
	t.Unlock()
	if empty && c != nil {
		// The client's last lock: its lanes look whether they are idle,
		// and give themselves back after idleRetire (client.retire).
		c.kickAll()
	}
	if !queued || c == nil {
		return
	}
	if l := c.owner(e); l != nil {
		l.ended()
	}
}

// tableObserver is the watchdog as the registry's tables see it: it
// learns of the holder's commands through the table.Observer interface,
// which is machinery and no part of the watchdog's API.
type tableObserver struct{ w *Watchdog }

var _ table.Observer = tableObserver{}

func (o tableObserver) ChangedLocked(t *table.Table, e *table.Entry) bool {
	return o.w.changedLocked(t, e)
}

func (o tableObserver) Changed(t *table.Table, e *table.Entry) { o.w.changedOutside(t, e) }

func (o tableObserver) Ended(t *table.Table, e *table.Entry, how table.End, told bool) {
	o.w.endedByHolder(t, e, how, told)
}

func (o tableObserver) Taken(t *table.Table, old *table.Entry, info table.Info) {
	o.w.taken(t, old, info)
}

func (o tableObserver) Contended(t *table.Table, e *table.Entry) { o.w.contended(t, e) }
func (o tableObserver) CopyNotHeld(t *table.Table, e *table.Entry, g *table.Group, told bool) {
	o.w.copyNotHeld(t, e, g, told)
}

// forgetFresh takes e's Fresh mark away through its lane, if it has one;
// the table must be locked. Only a fresh lock looks its lane up (on a
// Ring, a hash of its key).
func (c *client) forgetFresh(e *table.Entry) {
	if !e.Fresh() {
		return
	}
	if l := c.owner(e); l != nil {
		l.forgetFresh(e)
	}
}
