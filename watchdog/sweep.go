package watchdog

import (
	"cmp"
	"sync"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// sweep renews the locks of the lane's endpoint and returns when every
// call it sent has answered or been hedged, with the first renewal error.
// Its calls go through the lane's scheduler (offer), which sends them
// when the lane may have one more call in flight and no lock is more
// urgent. A tick's sweep (all false) leaves out the locks the schedule
// renews (the fast lane: locks that cannot wait for the next tick, and
// retries): renewing them too would double a tick's work for nothing. A
// Sweep call's (all true) renews them too.
func (l *lane) sweep(all bool) error {
	w, t := l.w, l.c.t
	start := time.Now()
	defer l.swept(start)
	if !l.answers() {
		// The endpoint does not answer: its locks wait in the schedule,
		// where they are sent by urgency, rather than a sweep's worth of
		// calls each waiting to be hedged.
		l.queueAll()
		return l.lastError()
	}
	sp := &sweepPass{l: l, run: &sweepRun{}, maxHold: w.maxHoldNs(), now: w.set.Since(start), cluster: l.c.cluster, all: all}
	l.paceSweep(all, sp.now)
	if !sp.cluster {
		if sp.p = l.sweepPipe(); sp.p == nil {
			return l.endErr()
		}
		sp.limit = l.c.chunk
	}
	t.Walk(sp.visit, sp.pause)
	sp.finish()
	sp.run.wg.Wait()
	if sp.aborted && w.ctx.Err() != nil {
		// Stop refused the sweep's next call: what it did not send is not
		// renewed, and no call of it may have failed (CI run 124, the
		// newest Go beside two CPU burners: a Sweep in flight at Stop
		// returned nil). The sweep says Stop ended it.
		return ErrStopped
	}
	if sp.aborted {
		// The endpoint stopped answering half-way: what the sweep did not
		// send waits in the schedule (what it did send is renewed once
		// more).
		l.queueAll()
	}
	l.trim(t.Len())
	return sp.run.err()
}

// answers reports whether the endpoint answers: its last renewal did not
// fail for want of an answer, and no call was hedged since one answered
// in time.
func (l *lane) answers() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.down && !l.hedging
}

// paceSweep sets the pace of a sweep that begins at now (ns since the
// set's epoch): a tick's sweep (all false) should end half-way to the
// next tick, and sends a second call only when its pace so far would not
// (passRun.sweepLate); a Sweep call's sends as fast as it may.
func (l *lane) paceSweep(all bool, now int64) {
	var by int64
	if !all {
		by = max(now+max(l.w.nextTickNs(now)-now, 0)/2, 1)
	}
	locks := l.c.t.Len() // before the first sweep: every lock, at most
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepFrom, l.sweepBy, l.sweepSent, l.sweepWant = now, by, 0, cmp.Or(l.sweepLastN, locks)
}

// swept records a sweep that began at start.
func (l *lane) swept(start time.Time) {
	took := time.Since(start)
	l.sweeps.Add(1)
	l.w.sweeps.Add(1)
	l.mu.Lock()
	l.sweepTook = took
	if l.sweepSent > 0 {
		l.sweepLastN = l.sweepSent
	}
	l.mu.Unlock()
	l.w.each(func(o Observer) { o.Swept(l.name, took) })
}

// sweepPass is one sweep's walk over the table: it fills a call (on a
// cluster, a segment sorted by slot) with the locks of the lane's
// endpoint and offers it to the scheduler when full.
type sweepPass struct {
	l       *lane
	run     *sweepRun
	maxHold int64
	now     int64
	cluster bool
	all     bool // the fast lane's locks too (a Sweep call)

	p       *pipe // the call being filled (not on a cluster)
	limit   int   // keys a call carries
	keys    int   // keys in p
	bytes   int   // bytes in p (callBytes)
	held    []loss
	aborted bool
}

// visit looks at one lock, with the table locked; true asks Walk to pause
// (and call pause) because a call or segment is full. Locks in flight or
// whose holder's command is on its way are left out, and, on a tick, those
// the schedule renews.
func (sp *sweepPass) visit(e *table.Entry) bool {
	l, t := sp.l, sp.l.c.t
	if e.InFlight() || !l.owns(e) {
		return false
	}
	if e.Busy() {
		// Its holder's command decides its fate, but the holder of a
		// refresh on its way is told by its tell time all the same (I15):
		// the schedule looks at it then (passRun.visit). A refresh that
		// hangs may land after the key expired.
		if t.RefreshingLocked(e) && !e.Queued() && !e.IsReady() && !e.Fresh() {
			l.schedule(e, tellAt(e, l.tellLagNs.Load()))
		}
		return false
	}
	if sp.maxHold > 0 && sp.now-e.Obtained >= sp.maxHold {
		if info, ok := t.Drop(e); ok {
			l.forgetFresh(e)
			sp.held = append(sp.held, l.loss(e, info, ErrMaxHold))
		}
		return false
	}
	if !sp.all && (e.Queued() || e.IsReady() || e.Fresh()) || l.w.filtered(t, e) {
		return false
	}
	if sp.cluster {
		l.segment = append(l.segment, e)
		return len(l.segment) >= clusterSegment
	}
	if len(sp.p.entries) == 0 || tellKey(e) < sp.p.key {
		sp.p.key = tellKey(e)
	}
	sp.p.entries = append(sp.p.entries, e)
	sp.keys += t.KeyCountLocked(e)
	sp.bytes += callBytes(t, e)
	return sp.keys >= sp.limit || sp.bytes >= maxCallBytes
}

// pause offers what visit filled, with the table not locked, and reports
// whether the walk goes on.
func (sp *sweepPass) pause() bool {
	l := sp.l
	l.w.report(sp.held...)
	sp.held = sp.held[:0]
	if sp.cluster {
		sp.aborted = !l.sendSegment(sp.run)
		return !sp.aborted
	}
	p := sp.p
	sp.p, sp.keys, sp.bytes = nil, 0, 0
	if !l.offer(p, sp.run) {
		sp.aborted = true
		return false
	}
	sp.p = l.sweepPipe()
	sp.aborted = sp.p == nil
	return !sp.aborted
}

// finish offers what the walk left unsent.
func (sp *sweepPass) finish() {
	l := sp.l
	l.w.report(sp.held...)
	switch {
	case sp.cluster:
		if !sp.aborted {
			sp.aborted = !l.sendSegment(sp.run)
		}
	case sp.p == nil:
	case len(sp.p.entries) > 0:
		sp.aborted = !l.offer(sp.p, sp.run)
	default:
		l.putPipe(sp.p)
	}
	sp.p = nil
}

// trim lets go of buffers sized for more locks than the endpoint has now
// (after many were released): idle pipelines larger than the locks need,
// and the cluster sweeper's segment, so that memory goes back with the
// locks. On an endpoint with few locks (under smallTable) it also lets go
// of its sweep's large pipelines: kept from one sweep to the next they
// would cost tens of bytes per lock, while making them anew costs a few
// hundred kilobytes of garbage a sweep. The small pipelines of the fast
// lane and retries are kept.
func (l *lane) trim(locks int) {
	need := min(locks, l.c.chunk)
	kept := 0
	for range cap(l.pool) {
		var p *pipe
		select {
		case p = <-l.pool:
		default:
		}
		if p == nil {
			break
		}
		if cap(p.entries) > 2*need+64 || kept >= 2 && locks < l.c.chunk || locks < smallTable && cap(p.entries) > smallPipe {
			l.pipes.Add(-1) // dropped: a new one is made when needed
			continue
		}
		kept++
		defer l.putPipe(p)
	}
	if cap(l.segment) > 4*locks+1024 {
		l.segment = nil
	}
}

// sendSegment sorts the cluster sweeper's segment by slot and offers it,
// call by call. It reports whether the sweep may go on.
func (l *lane) sendSegment(run *sweepRun) bool {
	seg := l.segment
	defer func() {
		clear(l.segment)
		l.segment = l.segment[:0]
	}()
	if len(seg) == 0 {
		return true
	}
	orderBySlot(seg)
	t := l.c.t
	for len(seg) > 0 {
		p := l.sweepPipe()
		if p == nil {
			return false
		}
		n, keys, bytes := 0, 0, 0
		t.Lock() // for the keys of locks over several keys, and tell keys
		for n < len(seg) {
			e := seg[n]
			k, b := t.KeyCountLocked(e), callBytes(t, e)
			if n > 0 && (keys+k > l.c.chunk || bytes+b > maxCallBytes) {
				break
			}
			if n == 0 || tellKey(e) < p.key {
				p.key = tellKey(e)
			}
			keys, bytes = keys+k, bytes+b
			n++
		}
		t.Unlock()
		p.entries = append(p.entries, seg[:n]...)
		seg = seg[n:]
		if !l.offer(p, run) {
			return false
		}
	}
	return true
}

// sweepRun follows the pipelines of one sweep.
type sweepRun struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	first error
}

func (r *sweepRun) done(err error) {
	if err != nil {
		r.mu.Lock()
		r.first = cmp.Or(r.first, err)
		r.mu.Unlock()
	}
	r.wg.Done()
}

func (r *sweepRun) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

// queueAll schedules every lock of the lane's endpoint that the filter
// accepts as a retry: the endpoint does not answer, and the scheduler
// sends them by urgency, a few calls at a time, as they fall due.
func (l *lane) queueAll() {
	w, t := l.w, l.c.t
	now := w.set.Now()
	t.Walk(func(e *table.Entry) bool { // with the table locked
		if !e.Detached() && !e.InFlight() && l.owns(e) && !w.filtered(t, e) {
			e.Fail()
			l.schedule(e, now)
		}
		return false
	}, nil)
	l.kickDue()
}
