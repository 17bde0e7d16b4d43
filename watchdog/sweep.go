package watchdog

import (
	"cmp"
	"sync"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// sweep renews every lock of the lane's endpoint and returns when every
// pipeline it sent has answered or been given up, with the first renewal
// error.
func (l *lane) sweep() error {
	w, t := l.w, l.c.t
	start := time.Now()
	defer l.swept(start)
	if l.isDown() {
		// The endpoint failed: its locks wait in the due list, where one
		// pipeline at a time tries it again, instead of a sweep's worth of
		// pipelines each waiting for the timeout.
		l.queueAll()
		return l.lastError()
	}
	sp := &sweepPass{l: l, run: &sweepRun{}, maxHold: w.maxHoldNs(), now: w.set.Since(start), cluster: l.c.cluster}
	if !sp.cluster {
		if sp.p = l.sweepPipe(); sp.p == nil {
			return nil
		}
		sp.limit = l.pipeKeys()
	}
	t.Walk(sp.visit, sp.pause)
	sp.finish()
	sp.run.wg.Wait()
	if sp.aborted && l.isDown() {
		// The endpoint failed half-way: what the sweep did not send waits
		// in the due list (what it did send is renewed once more).
		l.queueAll()
	}
	l.trim(t.Len())
	return sp.run.err()
}

// swept records a sweep that began at start.
func (l *lane) swept(start time.Time) {
	took := time.Since(start)
	l.sweeps.Add(1)
	l.w.sweeps.Add(1)
	l.mu.Lock()
	l.sweepTook = took
	l.mu.Unlock()
	l.w.each(func(o Observer) { o.Swept(l.name, took) })
}

// sweepPass is one sweep's walk over the table: it fills a pipeline (on a
// cluster, a segment sorted by slot) with the locks of the lane's
// endpoint and sends it when full, at most sweepPipes in flight.
type sweepPass struct {
	l       *lane
	run     *sweepRun
	maxHold int64
	now     int64
	cluster bool

	p       *pipe // the pipeline being filled (not on a cluster)
	limit   int   // keys a pipeline carries
	keys    int   // keys in p
	held    []loss
	aborted bool
}

// visit looks at one lock, with the table locked; true asks Walk to pause
// (and call pause) because a pipeline or segment is full.
func (sp *sweepPass) visit(e *table.Entry) bool {
	l, t := sp.l, sp.l.c.t
	if e.InFlight() || e.Busy() || !l.owns(e) {
		return false
	}
	if sp.maxHold > 0 && sp.now-e.Obtained >= sp.maxHold {
		if info, ok := t.Drop(e); ok {
			l.forgetFresh(e)
			sp.held = append(sp.held, l.loss(e, info, ErrMaxHold))
		}
		return false
	}
	if l.w.filtered(t, e) {
		return false
	}
	if sp.cluster {
		l.segment = append(l.segment, e)
		return len(l.segment) >= clusterSegment
	}
	sp.p.entries = append(sp.p.entries, e)
	sp.keys += t.KeyCountLocked(e)
	return sp.keys >= sp.limit
}

// pause sends what visit filled, with the table not locked, and reports
// whether the walk goes on.
func (sp *sweepPass) pause() bool {
	l := sp.l
	l.w.report(sp.held...)
	sp.held = sp.held[:0]
	if sp.cluster {
		sp.aborted = !l.sendSegment(sp.run)
		return !sp.aborted
	}
	l.launch(sp.p, sp.run, true)
	sp.p, sp.keys = nil, 0
	if l.isDown() {
		sp.aborted = true
		return false
	}
	sp.p = l.sweepPipe()
	sp.aborted = sp.p == nil
	return !sp.aborted
}

// finish sends what the walk left unsent.
func (sp *sweepPass) finish() {
	l := sp.l
	l.w.report(sp.held...)
	switch {
	case sp.cluster:
		if !sp.aborted {
			sp.aborted = !l.sendSegment(sp.run)
		}
	case sp.p == nil:
	case len(sp.p.entries) > 0 && !l.isDown():
		l.launch(sp.p, sp.run, true)
	default:
		l.putPipe(sp.p)
		l.sweepEnded()
	}
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
	need := min(locks, l.pipeKeys())
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
		if cap(p.entries) > 2*need+64 || kept >= 2 && locks < l.pipeKeys() || locks < smallTable && cap(p.entries) > smallPipe {
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

// sendSegment sorts the cluster sweeper's segment by slot and sends it,
// pipeline by pipeline. It reports whether the sweep may go on.
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
	limit := l.pipeKeys()
	for len(seg) > 0 {
		if l.isDown() {
			return false
		}
		p := l.sweepPipe()
		if p == nil {
			return false
		}
		n, keys := 0, 0
		for n < len(seg) && (n == 0 || keys+weight(seg[n]) <= limit) {
			keys += weight(seg[n])
			n++
		}
		p.entries = append(p.entries, seg[:n]...)
		seg = seg[n:]
		l.launch(p, run, true)
	}
	return true
}

// pipeKeys is how many keys one pipeline carries.
func (l *lane) pipeKeys() int { return l.c.chunk * pipelineCalls }

// sweepEnded frees the slot of a sweep pipeline that ended.
func (l *lane) sweepEnded() { <-l.sweepSem }

// sweepPipe waits until the sweep may have one more pipeline in flight and
// returns an idle one; nil when the lane or the watchdog stops.
func (l *lane) sweepPipe() *pipe {
	select {
	case l.sweepSem <- struct{}{}:
	case <-l.quit:
		return nil
	case <-l.w.ctx.Done():
		return nil
	}
	if p := l.getPipe(); p != nil {
		return p
	}
	// Every pipeline is stuck on a stalled endpoint: wait for one.
	select {
	case p := <-l.pool:
		return p
	case <-l.quit:
	case <-l.w.ctx.Done():
	}
	l.sweepEnded()
	return nil
}

// getPipe returns an idle pipeline, a new one while the lane has fewer
// than maxPipes, or nil.
func (l *lane) getPipe() *pipe {
	select {
	case p := <-l.pool:
		return p
	default:
	}
	if l.pipes.Add(1) > maxPipes {
		l.pipes.Add(-1)
		return nil
	}
	return &pipe{l: l}
}

func (l *lane) putPipe(p *pipe) {
	p.reset()
	select {
	case l.pool <- p:
	default: // cannot happen: at most maxPipes exist
	}
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

// queueAll puts every lock of the lane's endpoint that the filter accepts
// in its due list for a retry: the endpoint failed, and the due loop tries
// it again one pipeline at a time.
func (l *lane) queueAll() {
	w, t := l.w, l.c.t
	t.Walk(func(e *table.Entry) bool { // with the table locked
		if !e.Detached() && l.owns(e) && !w.filtered(t, e) {
			e.Fail()
			if e.Enqueue() {
				l.addDue(e)
			}
		}
		return false
	}, nil)
	kick(l.dueKick)
}
