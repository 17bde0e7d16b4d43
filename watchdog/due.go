package watchdog

import (
	"slices"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// minStale is how many ended locks a due list may hold before the holder's
// releases ask the due loop to drop them (when they are also at least half
// the list, so that each pass over the list is paid for by the releases
// that asked for it).
const minStale = 256

// ended learns that the holder ended a lock that is in l's due list: a
// lock released long before it would be due keeps its entry alive in the
// list until then, and a process that obtains and releases many short
// locks would hold thousands of them.
func (l *lane) ended() {
	if n := l.stale.Add(1); n >= minStale && n >= l.dueLen.Load()/2 {
		l.stale.Store(0)
		kick(l.dueKick)
	}
}

// addDue appends es to the due list; the table must be locked. A fresh
// entry is fresh no longer.
func (l *lane) addDue(es ...*table.Entry) {
	for _, e := range es {
		l.forgetFresh(e)
	}
	l.due = append(l.due, es...)
	l.dueLen.Store(int64(len(l.due)))
}

// downKeys is how many keys the due loop sends at once to an endpoint that
// does not answer: a few calls, not a sweep's worth each waiting for its
// timeout; and not one call alone either, for a renewal given up because
// the process itself was starved of CPU also marks the endpoint down, and
// its locks must all be tried again before their TTL runs out.
const downKeys = 1000

// freshWalk is how many locks of the table a fresh lock may stand for at
// most: the look that lists fresh locks visits every lock of the table,
// so a table much larger than its fresh locks (a few short locks among
// many long ones) lists its short locks at once instead.
const freshWalk = 8

// leaveFresh marks e, a lock that cannot wait for the next tick and is not
// in the due list, Fresh rather than listing it, and makes sure the due
// loop looks at the table by the time e is due (a third of its TTL after
// Redis confirmed it): the look lists every fresh lock still held, and the
// same run renews the ones due by then, the others later from the list. A
// lock released before then costs the fast lane nothing more. leaveFresh
// declines (false) when the table is too large for its fresh locks
// (freshWalk). The table must be locked.
func (l *lane) leaveFresh(t *table.Table, e *table.Entry) bool {
	if !e.Fresh() {
		if (l.fresh+1)*freshWalk < t.LenLocked() {
			return false
		}
		e.MakeFresh()
		l.fresh++
	}
	if at := e.Confirmed + int64(e.TTL)/3; l.freshAt == 0 || at < l.freshAt {
		l.freshAt = at
		l.wakeBy(l.w.set.At(at))
	}
	return true
}

// forgetFresh takes e's Fresh mark away, if it has one; the table must be
// locked. fresh may count more entries than are marked (an entry dropped
// where no lane sees it keeps its mark), never fewer: a look the due loop
// did not need costs a walk, one it skipped would cost a lock.
func (l *lane) forgetFresh(e *table.Entry) {
	if e.Unfresh() {
		l.fresh--
	}
}

// wakeBy makes sure the due loop runs by when; the table must be locked.
func (l *lane) wakeBy(when time.Time) {
	if l.dueAt.IsZero() || when.Before(l.dueAt) {
		l.dueAt = when // until the due loop looks: later newcomers need no wake
		kick(l.dueKick)
	}
}

func (l *lane) dueLoop() {
	defer l.w.loops.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var next, measured time.Time
	var lag time.Duration // the recent lag: how late the timer woke the loop
	for {
		next = l.runDue(time.Now(), lag)
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		select {
		case <-l.w.ctx.Done():
			timer.Stop()
			return
		case <-l.quit:
			timer.Stop()
			return
		case <-l.dueKick:
			timer.Stop() // a kick tells nothing of how late the process runs
		case <-timer.C:
			now := time.Now()
			late := max(now.Sub(next), 0)
			if !measured.IsZero() {
				lag = max(lag-now.Sub(measured)/lagDecay, 0)
			}
			lag, measured = max(lag, late), now
		}
	}
}

// dueSlack is how many entries a due list's array may have room for beyond
// four times its length before runDue lets it go for a smaller one: 64 KB,
// so that a list that empties and fills again with every batch of short
// locks (redsync's default expiry puts every lock in the fast lane) keeps
// its array rather than growing a new one each time.
const dueSlack = 8192

// runDue goes through the due list at now: it sends the locks due for a
// renewal (the fast lane's when a third of their TTL has passed since Redis
// last confirmed them, up to a sixth early so that locks due close
// together share a pipeline; failed ones when the lane's retry time has
// come, one pipeline at a time while the endpoint is down), gives up
// failed ones whose TTL since their last confirmation has passed, ends
// those past max hold, hands locks whose slot moved to their new lane, and
// returns when it must look again.
//
// A lock is given up only when it may really have expired: no renewal of
// it is on its way (its answer decides), and its TTL since its last
// confirmation has passed by more than lagFactor times the process's own
// recent scheduling lag (lag), so that a starved process does not take
// its own slowness for Redis's silence: an answer that would confirm the
// lock may be waiting unread. The wait ends a second TTL after the last
// confirmation.
func (l *lane) runDue(now time.Time, lag time.Duration) time.Time {
	l.dueRuns.Add(1)
	w, t := l.w, l.c.t
	r := &dueRun{l: l, now: now, nowNs: w.set.Since(now), lag: int64(lag), maxHold: w.maxHoldNs(), tol: l.tolerance()}
	l.lookFresh(r.nowNs)
	t.Lock()
	l.mu.Lock()
	r.tick = w.nextTickNs(r.nowNs)
	r.retryDue = !now.Before(l.retryAt)
	r.retryAt = w.set.Since(l.retryAt)
	r.budget = -1
	if l.down {
		r.budget = max(l.pipeKeys(), downKeys) // a few calls try the endpoint again
	}
	keep := l.due[:0]
	for _, e := range l.due {
		if r.visit(e) {
			keep = append(keep, e)
		}
	}
	if l.freshAt != 0 {
		r.wake(l.freshAt) // fresh locks obtained while this run went through the list
	}
	l.keepDue(keep)
	order(r.send)
	l.dueAt = r.nextTime()
	l.mu.Unlock()
	t.Unlock()
	return r.finish()
}

// lookFresh lists the lane's fresh locks still held once the first of
// them may be renewed (see leaveFresh).
func (l *lane) lookFresh(nowNs int64) {
	t := l.c.t
	t.Lock()
	look := l.freshAt != 0 && nowNs >= l.freshAt
	if look {
		l.freshAt = 0
		look = l.fresh > 0 // all released (the usual end of short locks): nothing to list
	}
	t.Unlock()
	if look {
		l.w.queueFast(t) // lists every short lock not listed yet, the fresh ones among them
	}
}

// keepDue makes keep the due list; the table must be locked.
func (l *lane) keepDue(keep []*table.Entry) {
	clear(l.due[len(keep):])
	l.due = keep
	l.dueLen.Store(int64(len(keep)))
	l.stale.Store(0)
	if cap(l.due) > 4*len(keep)+dueSlack {
		l.due = slices.Clip(slices.Clone(keep)) // the list shrank a lot: let its array go
	}
}

// dueRun is one pass of a lane's due loop over its due list, at nowNs.
type dueRun struct {
	l        *lane
	now      time.Time
	nowNs    int64
	lag      int64 // the process's recent scheduling lag, in ns
	maxHold  int64
	tol      time.Duration
	tick     int64 // the next tick
	retryDue bool  // the lane's retry time has come
	retryAt  int64
	budget   int // keys one pipeline may still carry while the endpoint is down; -1: no bound

	send  []*table.Entry
	moved map[*lane][]*table.Entry
	lost  []loss
	next  int64 // when the loop must look again; 0: no need
}

func (r *dueRun) wake(at int64) {
	if r.next == 0 || at < r.next {
		r.next = at
	}
}

func (r *dueRun) nextTime() time.Time {
	if r.next == 0 {
		return time.Time{}
	}
	return r.l.w.set.At(r.next)
}

// visit decides about one entry of the due list, with the table and the
// lane locked, and reports whether it stays in the list.
func (r *dueRun) visit(e *table.Entry) bool {
	if r.leaves(e) {
		return false
	}
	r.schedule(e)
	return true
}

// leaves reports whether e leaves the due list: untracked, its slot moved
// to another lane, past its max hold, given up, or a lock the next tick
// renews soon enough.
func (r *dueRun) leaves(e *table.Entry) bool {
	l, t := r.l, r.l.c.t
	if e.Detached() {
		e.Dequeue()
		return true
	}
	if l.c.cluster {
		if o := l.c.owner(e); o != l && o != nil {
			if r.moved == nil {
				r.moved = make(map[*lane][]*table.Entry)
			}
			r.moved[o] = append(r.moved[o], e)
			return true
		}
	}
	inFlight := e.InFlight()
	if r.maxHold > 0 && r.nowNs-e.Obtained >= r.maxHold && !inFlight {
		if info, ok := t.Drop(e); ok {
			e.Dequeue()
			r.lost = append(r.lost, l.loss(e, info, ErrMaxHold))
			return true
		}
	}
	retry := e.Retrying()
	if since := r.nowNs - e.Confirmed; retry && since >= int64(e.TTL) && !inFlight {
		wait := min(lagFactor*r.lag, int64(e.TTL))
		if since < int64(e.TTL)+wait {
			r.wake(e.Confirmed + int64(e.TTL) + wait)
		} else if info, ok := t.Drop(e); ok {
			e.Dequeue()
			r.lost = append(r.lost, l.loss(e, info, l.unreachableLocked()))
			return true
		}
	}
	if !retry && !needsFast(e.TTL, e.Confirmed, r.tick, r.tol) {
		e.Dequeue() // the next tick is soon enough
		return true
	}
	return false
}

// schedule sends e now or makes sure the loop looks at it when it is due.
func (r *dueRun) schedule(e *table.Entry) {
	retry := e.Retrying()
	// A process that runs late renews earlier, by lagFactor times its lag
	// (up to a sixth of the TTL): its renewal may wait that long to be
	// sent, and its answer to be read.
	due := e.Confirmed + int64(e.TTL)/3 - min(lagFactor*r.lag, int64(e.TTL)/6)
	early := max(due-int64(e.TTL)/6, e.Confirmed+int64(e.TTL)/12)
	if retry {
		due, early = r.retryAt, r.retryAt
		if deadline := e.Confirmed + int64(e.TTL); deadline > r.nowNs {
			r.wake(deadline) // when it may be given up; past it, the answer on its way or the wait for the lag wakes the loop
		}
	}
	if r.maxHold > 0 {
		r.wake(e.Obtained + r.maxHold)
	}
	ready := r.nowNs >= early && (!retry || r.retryDue)
	switch {
	case e.InFlight():
		// Its renewal is on its way. Once it is renewed it is due again
		// in a third of its TTL; a failure wakes the loop.
		r.wake(r.nowNs + int64(e.TTL)/3)
	case e.Busy():
		// The holder's command is on its way: look again soon after.
		r.wake(max(due, r.nowNs+int64(2*time.Millisecond)))
	case ready && r.budget != 0:
		r.send = append(r.send, e)
		if r.budget > 0 {
			r.budget = max(r.budget-r.l.c.t.KeyCountLocked(e), 0)
		}
		r.wake(r.nowNs + int64(e.TTL)/3)
	case ready:
		// The endpoint is down and one pipeline tries it again; its
		// answer wakes the loop.
		r.wake(r.nowNs + int64(retryDelay(e.TTL)))
	default:
		r.wake(due)
	}
}

// finish, with no lock held, hands the locks whose slot moved to their
// lanes, reports the locks given up and sends the ones due; it returns
// when the loop must look again.
func (r *dueRun) finish() time.Time {
	l, t := r.l, r.l.c.t
	for o, es := range r.moved {
		o.adopt(es)
	}
	l.lost.Add(int64(len(r.lost)))
	l.w.report(r.lost...)
	if !l.sendDue(r.send) {
		// Every pipeline is stuck on a stalled endpoint: look again soon.
		r.wake(r.nowNs + int64(50*time.Millisecond))
		t.Lock()
		l.dueAt = r.nextTime()
		t.Unlock()
	}
	return r.nextTime()
}

// sendDue sends es from the due list, in as few pipelines as it can. It
// reports false when it could not send them all: no pipeline was free.
func (l *lane) sendDue(es []*table.Entry) bool {
	if len(es) == 0 {
		return true
	}
	limit := l.pipeKeys()
	for len(es) > 0 {
		p := l.getPipe()
		if p == nil {
			return false
		}
		n, keys := 0, 0
		for n < len(es) && (n == 0 || keys+weight(es[n]) <= limit) {
			keys += weight(es[n])
			n++
		}
		p.entries = append(p.entries, es[:n]...)
		es = es[n:]
		l.launch(p, nil, false)
	}
	return true
}

// needsFast reports whether a lock confirmed at confirmed with ttl must be
// renewed before the tick at next (all in ns since the set's epoch): its
// deadline (a third of the TTL left, plus a twelfth as margin) comes before
// the tick, give or take tol.
func needsFast(ttl time.Duration, confirmed, next int64, tol time.Duration) bool {
	deadline := confirmed + int64(2*ttl/3-ttl/12)
	return deadline < next+int64(tol)
}
