package watchdog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/table"
)

const (
	// pipelineCalls is how many full renew calls one pipeline carries:
	// one, so that a renewal holds Redis for no longer than one call of
	// DefaultChunkSize keys (about 0.8 ms), and is sent from the client's
	// own pool (no pipeline pool of its own).
	pipelineCalls = 1
	// sweepPipes is how many pipelines of one sweep are in flight at once
	// on one endpoint: two, so that Redis has the next call as soon as it
	// is done with one, and serves the application's commands between
	// them (Redis serves each connection's commands in turn).
	sweepPipes = 2
	// maxPipes bounds the pipelines an endpoint has at all, those in
	// flight, those given up but not yet answered (a stalled server) and
	// idle ones. When none is free the due list waits for its next round.
	maxPipes = 16
	// locksPerPipe is how many locks of the table make a sweep use one more
	// pipeline in flight, up to sweepPipes.
	locksPerPipe = 8000
	// clusterSegment is how many locks a cluster lane lists and sorts by
	// slot at a time, so that locks of one slot share calls.
	clusterSegment = 1 << 17
	// smallTable is the number of locks under which an endpoint keeps no
	// idle pipeline larger than smallPipe entries between sweeps.
	smallTable = 2 * locksPerPipe
	smallPipe  = 256
	// tickTolerance covers the difference between the tick time the
	// watchdog predicts and the one a lock's renewal really starts at (cron
	// wakes a little late); a lane adds how long its last sweep took.
	tickTolerance = time.Second
	// dialProbeTimeout bounds the dial that looks for why an endpoint does
	// not answer.
	dialProbeTimeout = time.Second
	// minWait is the least time the watchdog waits for a renewal's answer
	// before it lets its locks be retried.
	minWait = 10 * time.Millisecond
	// lagFactor: a lock whose TTL since its last confirmation has passed
	// is given up only once it has passed by lagFactor times the due
	// loop's recent lag (how late its timer wakes it, the process's own
	// scheduling delay): an answer that would confirm the lock may be
	// waiting unread while the process is starved of CPU, and the
	// goroutine that reads it is as late as the due loop, or later. The
	// wait ends a second TTL after the last confirmation whatever the lag.
	lagFactor = 4
	// lagDecay is how fast the lag the due loop remembers fades: by
	// 1/lagDecay of the time since it was last measured.
	lagDecay = 4
)

// A lane renews the locks that live on one Redis endpoint: a watched
// client, or one master node of a cluster client. Everything that can wait
// for Redis waits in the lane of the endpoint it waits for, so that a
// stalled, dead or slow endpoint delays no renewal on another one.
//
// A lane has two goroutines. The sweeper renews every lock of the endpoint
// when a tick or Sweep asks it to, several pipelines in flight. The due
// loop renews, between ticks, the locks that cannot wait for the next tick
// (the fast lane) and those whose renewal failed (retries); one timer
// serves them all. Both send their pipelines on goroutines of their own,
// each bounded by the renewal timeout, and apply the answers as they come.
type lane struct {
	w     *Watchdog
	c     *client
	name  string // the endpoint, for logs and stats
	shard string // a Ring's shard: the address of the client renewals go to

	quit      chan struct{} // closed when the lane is no longer needed
	sweepKick chan struct{} // buffered 1
	dueKick   chan struct{} // buffered 1
	pool      chan *pipe    // idle pipelines; capacity maxPipes
	sweepSem  chan struct{} // capacity sweepPipes: sweep pipelines in flight
	pipes     atomic.Int32  // pipelines made

	// due and dueAt are guarded by the lock of the client's table, not
	// by mu: the registry's hook holds the table lock when it puts a
	// lock in the fast lane, and needs no other lock to do so.
	due   []*table.Entry // entries in the Queued state, in this lane
	dueAt time.Time      // when the due loop wakes next; zero when idle
	// fresh counts the entries in the Fresh state (on a client with one
	// endpoint), and freshAt is the earliest time one of them may be
	// renewed, in ns since the set's epoch (0: no look due). Guarded by
	// the table lock too.
	fresh   int
	freshAt int64

	mu        sync.Mutex // guards the fields below; taken after the table's
	wantSweep bool
	requests  []*request
	down      bool      // the last renewal on the endpoint failed
	retryAt   time.Time // when failed renewals are tried again
	lastErr   error     // the last renewal error
	cause     error     // the last error that tells why (not a mere timeout) since a success
	lastOK    time.Time
	sweepTook time.Duration
	probing   bool // a dial looks for the cause of a failure

	// dial opens a connection to the endpoint the way its client does,
	// to learn why it does not answer (nil when it cannot be told).
	dial func(context.Context) (net.Conn, error)

	renewed, failed, lost, sweeps atomic.Int64
	dueRuns                       atomic.Int64 // runDue calls, for tests
	// dueLen is len(due), read without mu, and stale how many entries of
	// due the holder has ended since the due loop last went through it:
	// the lane forgets ended locks lazily, and the holder asks the due
	// loop to drop them early when they are half the list (see
	// Watchdog.Ended).
	dueLen, stale atomic.Int64
	segment       []*table.Entry // the sweeper's, on a cluster
}

func newLane(c *client, name string) *lane {
	l := &lane{
		w:         c.w,
		c:         c,
		name:      name,
		quit:      make(chan struct{}),
		sweepKick: make(chan struct{}, 1),
		dueKick:   make(chan struct{}, 1),
		pool:      make(chan *pipe, maxPipes),
		sweepSem:  make(chan struct{}, sweepPipes),
	}
	l.dial = dialerFor(c, name)
	l.w.loops.Add(2)
	go l.sweeper()
	go l.dueLoop()
	return l
}

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

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// stopped reports whether the lane must end.
func (l *lane) stopped() bool {
	select {
	case <-l.quit:
		return true
	case <-l.w.ctx.Done():
		return true
	default:
		return false
	}
}

// ask asks the sweeper for a sweep; r, when not nil, learns when it is done.
func (l *lane) ask(r *request) {
	l.mu.Lock()
	l.wantSweep = true
	if r != nil {
		r.wg.Add(1)
		l.requests = append(l.requests, r)
	}
	l.mu.Unlock()
	kick(l.sweepKick)
}

// owns reports whether e lives on this lane's endpoint.
func (l *lane) owns(e *table.Entry) bool { return l.c.owner(e) == l }

func (l *lane) sweeper() {
	defer l.w.loops.Done()
	defer l.finishRequests(ErrStopped)
	for {
		select {
		case <-l.w.ctx.Done():
			return
		case <-l.quit:
			return
		case <-l.sweepKick:
		}
		l.mu.Lock()
		want, reqs := l.wantSweep, l.requests
		l.wantSweep, l.requests = false, nil
		l.mu.Unlock()
		if !want {
			continue
		}
		err := l.sweep()
		for _, r := range reqs {
			r.finish(err)
		}
	}
}

// finishRequests ends the sweeps still asked for when the lane ends.
func (l *lane) finishRequests(err error) {
	l.mu.Lock()
	reqs := l.requests
	l.requests = nil
	l.mu.Unlock()
	for _, r := range reqs {
		r.finish(err)
	}
}

// sweep renews every lock of the lane's endpoint and returns when every
// pipeline it sent has answered or been given up, with the first renewal
// error.
func (l *lane) sweep() error {
	w, t := l.w, l.c.t
	start := time.Now()
	defer func() {
		took := time.Since(start)
		l.sweeps.Add(1)
		w.sweeps.Add(1)
		l.mu.Lock()
		l.sweepTook = took
		l.mu.Unlock()
		w.each(func(o Observer) { o.Swept(l.name, took) })
	}()
	if l.isDown() {
		// The endpoint failed: its locks wait in the due list, where one
		// pipeline at a time tries it again, instead of a sweep's worth of
		// pipelines each waiting for the timeout.
		l.queueAll()
		return l.lastError()
	}
	run := &sweepRun{}
	// A small table needs few pipelines in flight, and each pipeline's
	// buffers cost memory for as long as the lane keeps it: the tokens of
	// the pipelines this sweep does not need are taken up front.
	locks := t.Len()
	spare := sweepPipes - min(max(locks/locksPerPipe, 2), sweepPipes) // two at least: one stalled pipeline delays no other
	for range spare {
		l.sweepSem <- struct{}{}
	}
	defer func() {
		for range spare {
			<-l.sweepSem
		}
	}()
	var held []loss
	maxHold := w.maxHoldNs()
	now := w.set.Since(start)
	cluster := l.c.cluster
	var p *pipe
	if !cluster {
		if p = l.sweepPipe(); p == nil {
			return nil
		}
	}
	limit := 0
	if p != nil {
		limit = l.pipeKeys()
	}
	keys := 0
	aborted := false
	visit := func(e *table.Entry) bool {
		if e.InFlight() || e.Busy() || !l.owns(e) {
			return false
		}
		if maxHold > 0 && now-e.Obtained >= maxHold {
			if info, ok := t.Drop(e); ok {
				l.forgetFresh(e)
				held = append(held, l.loss(e, info, ErrMaxHold))
			}
			return false
		}
		if w.filtered(t, e) {
			return false
		}
		if cluster {
			l.segment = append(l.segment, e)
			return len(l.segment) >= clusterSegment
		}
		p.entries = append(p.entries, e)
		keys += t.KeyCountLocked(e)
		return keys >= limit
	}
	pause := func() bool {
		w.report(held...)
		held = held[:0]
		if cluster {
			aborted = !l.sendSegment(run)
			return !aborted
		}
		l.launch(p, run, true)
		p, keys = nil, 0
		if l.isDown() {
			aborted = true
			return false
		}
		p = l.sweepPipe()
		aborted = p == nil
		return !aborted
	}
	t.Walk(visit, pause)
	w.report(held...)
	if cluster {
		if !aborted {
			aborted = !l.sendSegment(run)
		}
	} else if p != nil {
		if len(p.entries) > 0 && !l.isDown() {
			l.launch(p, run, true)
		} else {
			l.putPipe(p)
			<-l.sweepSem
		}
	}
	run.wg.Wait()
	if aborted && l.isDown() {
		// The endpoint failed half-way: what the sweep did not send waits
		// in the due list (what it did send is renewed once more).
		l.queueAll()
	}
	l.trim(t.Len())
	return run.err()
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
	for {
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
		<-l.sweepSem
		return nil
	}
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

// launch holds p's entries, builds its calls and sends it on a goroutine of
// its own. The watchdog waits for the answer at most the renewal timeout;
// then it gives the pipeline up: its entries count as failed and are
// retried, while the pipeline ends on its own (go-redis ignores context
// deadlines on socket reads unless ContextTimeoutEnabled) and goes back to
// the pool when it does. A given-up pipeline that reaches Redis later
// changes nothing that is not ours: the script is owner-checked and never
// shortens a TTL on Redis 7. sweep says whether the pipeline counts
// against the sweep's share.
func (l *lane) launch(p *pipe, run *sweepRun, sweep bool) {
	w, t := l.w, l.c.t
	t.Lock()
	p.entries = t.HoldLocked(p.entries)
	if len(p.entries) > 0 {
		order(p.entries)
		p.build(t, l.c.chunk, w.set.Since(time.Now()))
	}
	t.Unlock()
	if len(p.entries) == 0 {
		l.putPipe(p)
		if sweep {
			<-l.sweepSem
		}
		return
	}
	if l.shard != "" {
		if sc := l.c.shardClient(l.shard); sc != nil {
			p.to = sc
		} else {
			p.toErr = fmt.Errorf("watchdog: ring shard %s is not live", l.shard)
		}
	}
	if run != nil {
		run.wg.Add(1)
		p.done = run.done
	}
	timeout := w.timeoutFor(p.ttls)
	// A renewal is waited for no longer than its locks have left: past
	// that they may have expired, and the due loop decides (an answer that
	// comes later is still applied).
	if left := time.Duration(p.left); left < timeout {
		timeout = max(left, minWait)
	}
	p.state.Store(pipeRunning)
	w.io.Add(1)
	go func() {
		defer w.io.Done()
		timer := time.AfterFunc(timeout, func() { l.abandon(p, errNoAnswer{timeout}, sweep) })
		stop := context.AfterFunc(w.ctx, func() { l.abandon(p, ErrStopped, sweep) })
		p.run(w.ctx, t, pipelineDeadline(timeout))
		timer.Stop()
		stop()
		if !p.end() {
			// Given up waiting: its entries were retried then. Its answer
			// is the truth about Redis all the same, and is applied; its
			// error, when it has one, says more than "no answer in time".
			if p.err != nil {
				l.lateError(p.err)
			}
			if w.ctx.Err() == nil {
				l.settleLate(p)
			} else {
				t.EndLate(p.entries)
			}
			l.putPipe(p)
			return
		}
		if sweep {
			<-l.sweepSem
		}
		done := p.done
		err := l.settle(p)
		l.putPipe(p)
		if done != nil {
			done(err)
		}
	}()
}

// abandon gives p up when it has not answered in time, or the watchdog
// stops: its entries count as failed (retried) and are no longer in flight,
// so that the holder's commands about them need not wait.
func (l *lane) abandon(p *pipe, cause error, sweep bool) {
	p.mu.Lock()
	if !p.state.CompareAndSwap(pipeRunning, pipeAbandoned) {
		p.mu.Unlock()
		return
	}
	es := slices.Clone(p.entries) // p stays in use by its pipeline
	done := p.done
	calls := len(p.ends)
	p.mu.Unlock()
	l.c.t.Release(es)
	if sweep {
		<-l.sweepSem
	}
	if !errors.Is(cause, ErrStopped) {
		l.w.failures.Add(1)
		l.w.renewErrors.Add(int64(calls))
		l.failed.Add(int64(len(es)))
		l.w.each(func(o Observer) { o.RenewFailed(l.name, calls, cause) })
		l.fail(es, cause)
	}
	if done != nil {
		done(cause)
	}
}

// settle applies a pipeline's answers: confirms the renewed locks, reports
// the lost ones, queues the failed ones for a retry, and moves locks into
// or out of the fast lane.
func (l *lane) settle(p *pipe) error {
	w, t := l.w, l.c.t
	sent := w.set.Since(p.sent)
	next := w.nextTickNs(sent)
	tol := l.tolerance()
	var (
		renewed, failed int
		minTTL          time.Duration
		soonest         int64 // the earliest due time of a lock added to the due list
		add             []*table.Entry
		lost            []loss
		headroom        = float32(1) // the least of the renewed locks'
	)
	queue := func(e *table.Entry, due int64) {
		if e.Enqueue() {
			add = append(add, e)
			if soonest == 0 || due < soonest {
				soonest = due
			}
		}
	}
	t.Settle(p.entries, p.res, sent, func(i int, e *table.Entry, r int8, dropped *table.Info) {
		switch {
		case dropped != nil:
			l.forgetFresh(e)
			reason := ErrLockGone
			if r == table.Taken {
				reason = ErrLockTaken
			}
			lost = append(lost, l.loss(e, *dropped, reason))
		case r == table.Renewed:
			renewed++
			headroom = min(headroom, p.heads[i])
			if needsFast(e.TTL, e.Confirmed, next, tol) {
				queue(e, e.Confirmed+int64(e.TTL)/3)
			}
		case r == table.Failed:
			failed++
			if minTTL == 0 || e.TTL < minTTL {
				minTTL = e.TTL
			}
			e.Fail()
			queue(e, 0)
		}
	})
	if renewed > 0 {
		l.renewed.Add(int64(renewed))
		w.renewals.Add(int64(renewed))
		w.o.logger.Debug("watchdog: renewed", "endpoint", l.name, "locks", renewed, "rtt", time.Since(p.sent))
		w.each(func(o Observer) { o.Renewed(l.name, renewed, float64(headroom)) })
	}
	if failed > 0 {
		w.failures.Add(1)
		w.renewErrors.Add(int64(p.failed))
		l.failed.Add(int64(failed))
		w.o.logger.Warn("watchdog: renewal failed; retrying", "endpoint", l.name, "locks", failed, "err", p.err)
		w.each(func(o Observer) { o.RenewFailed(l.name, p.failed, p.err) })
	}
	t.Lock()
	l.mu.Lock()
	if failed > 0 {
		// A pipeline none of whose calls succeeded says the endpoint
		// fails; one failed call among answered ones does not.
		l.noteFailureLocked(p.err, minTTL, renewed == 0)
	}
	back := false
	if renewed > 0 {
		back = l.down // the endpoint answers again: send its retries now
		l.down, l.cause = false, nil
		l.lastOK = time.Now()
	}
	l.mu.Unlock()
	l.addDue(add...)
	wake := back || failed > 0 || (len(add) > 0 && (l.dueAt.IsZero() || l.dueAt.After(w.set.At(soonest))))
	t.Unlock()
	if wake {
		kick(l.dueKick)
	}
	l.lost.Add(int64(len(lost)))
	w.report(lost...)
	if failed > 0 {
		l.c.failed(l, p.err)
		return p.err
	}
	return nil
}

// settleLate applies the answer of a pipeline the lane stopped waiting
// for (abandon): a renewed lock is confirmed as of when the pipeline was
// sent, a lock found gone or taken is reported lost unless something
// confirmed it since (see table.SettleLate). An answer shows the
// endpoint answers again.
func (l *lane) settleLate(p *pipe) {
	w, t := l.w, l.c.t
	sent := w.set.Since(p.sent)
	renewed := 0
	var lost []loss
	t.SettleLate(p.entries, p.res, sent, func(i int, e *table.Entry, r int8, dropped *table.Info) {
		switch {
		case dropped != nil:
			l.forgetFresh(e)
			reason := ErrLockGone
			if r == table.Taken {
				reason = ErrLockTaken
			}
			lost = append(lost, l.loss(e, *dropped, reason))
		case r == table.Renewed:
			renewed++
		}
	})
	if renewed > 0 {
		l.renewed.Add(int64(renewed))
		w.renewals.Add(int64(renewed))
		w.o.logger.Debug("watchdog: a late answer renewed locks", "endpoint", l.name, "locks", renewed, "rtt", time.Since(p.sent))
		l.mu.Lock()
		l.down, l.cause = false, nil
		l.lastOK = time.Now()
		l.mu.Unlock()
		kick(l.dueKick) // their retries may wait no more
	}
	l.lost.Add(int64(len(lost)))
	w.report(lost...)
}

// fail queues es, whose renewal failed with err, for a retry.
func (l *lane) fail(es []*table.Entry, err error) {
	t := l.c.t
	var add []*table.Entry
	var minTTL time.Duration
	t.Lock()
	for _, e := range es {
		if e.Detached() {
			continue
		}
		if minTTL == 0 || e.TTL < minTTL {
			minTTL = e.TTL
		}
		e.Fail()
		if e.Enqueue() {
			add = append(add, e)
		}
	}
	l.addDue(add...)
	l.mu.Lock()
	l.noteFailureLocked(err, minTTL, true)
	l.mu.Unlock()
	t.Unlock()
	kick(l.dueKick)
	l.w.o.logger.Warn("watchdog: renewal failed; retrying", "endpoint", l.name, "locks", len(es), "err", err)
	l.c.failed(l, err)
}

// noteFailureLocked records that a renewal on the endpoint failed; down
// says whether the endpoint itself failed (no answer at all).
func (l *lane) noteFailureLocked(err error, minTTL time.Duration, down bool) {
	if down {
		l.down = true
	}
	if err != nil {
		l.lastErr = err
		if timeoutLike(err) {
			l.probeLocked()
		} else {
			l.cause = err
		}
	}
	now := time.Now()
	at := now.Add(retryDelay(minTTL))
	if !l.retryAt.After(now) || at.Before(l.retryAt) {
		l.retryAt = at
	}
}

// retryDelay is how long a lane waits before trying a failed renewal again.
func retryDelay(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return time.Second
	}
	return min(max(ttl/10, 5*time.Millisecond), time.Second)
}

// lateError records the error a given-up pipeline ended with (go-redis
// retries a refused dial or a TRYAGAIN for a while, past the watchdog's
// wait): while no renewal has succeeded since, it is the cause a lock given
// up reports.
func (l *lane) lateError(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down && (l.cause == nil || !timeoutLike(err)) {
		l.cause = err
	}
}

// timeoutLike reports whether err says no more than that no answer came in
// time (the watchdog's wait, a context deadline, a network timeout): it
// does not tell why.
func timeoutLike(err error) bool {
	var na errNoAnswer
	if errors.As(err, &na) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// probeLocked dials the endpoint once, in the background, to learn why it
// does not answer in time: go-redis retries a refused dial until the
// renewal's deadline (v9.23) and then reports only the deadline. A dial
// error (the connection refused, no such host) becomes the cause a lock
// given up reports; a dial that succeeds (a stalled server still accepts
// connections) leaves the cause as it was. One probe at a time per lane;
// called with l.mu held.
func (l *lane) probeLocked() {
	if l.dial == nil || l.probing || l.w.ctx.Err() != nil {
		return
	}
	l.probing = true
	l.w.io.Add(1)
	go func() {
		defer l.w.io.Done()
		ctx, cancel := context.WithTimeout(l.w.ctx, dialProbeTimeout)
		conn, err := l.dial(ctx)
		cancel()
		if conn != nil {
			_ = conn.Close()
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.probing = false
		// The dial is the latest word on the endpoint: its error replaces
		// an older cause (the EOF of the connections a killed server
		// dropped, say).
		if err != nil && l.down && l.w.ctx.Err() == nil && !timeoutLike(err) {
			l.cause = err
		}
	}()
}

// dialerFor returns how to open a connection to the endpoint of the lane
// named addr on c, as c's client does: a plain or Sentinel client's own
// dialer (a Sentinel client's asks the Sentinels for the master), a
// cluster node's address with the cluster's dialer. nil for a Ring.
func dialerFor(c *client, addr string) func(context.Context) (net.Conn, error) {
	switch rc := c.t.Client.(type) {
	case *redis.Client:
		o := rc.Options()
		if o.Dialer == nil {
			return nil
		}
		return func(ctx context.Context) (net.Conn, error) { return o.Dialer(ctx, o.Network, o.Addr) }
	case *redis.ClusterClient:
		o := rc.Options()
		if o.Dialer != nil {
			return func(ctx context.Context) (net.Conn, error) { return o.Dialer(ctx, "tcp", addr) }
		}
		d := &net.Dialer{Timeout: dialProbeTimeout}
		return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	return nil
}

// unreachableLocked is the reason a lock given up on this lane reports.
func (l *lane) unreachableLocked() error {
	return &UnreachableError{Endpoint: l.name, Err: cmp.Or(l.cause, l.lastErr)}
}

func (l *lane) isDown() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.down
}

func (l *lane) lastError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

func (l *lane) tolerance() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return tickTolerance + l.sweepTook
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

// adopt takes entries queued in another lane that now belong to this one
// (a cluster's slots moved).
func (l *lane) adopt(es []*table.Entry) {
	if len(es) == 0 {
		return
	}
	t := l.c.t
	t.Lock()
	l.addDue(es...)
	t.Unlock()
	kick(l.dueKick)
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
	w, c, t := l.w, l.c, l.c.t
	nowNs := w.set.Since(now)
	t.Lock()
	look := l.freshAt != 0 && nowNs >= l.freshAt
	if look {
		l.freshAt = 0
		look = l.fresh > 0 // all released (the usual end of short locks): nothing to list
	}
	t.Unlock()
	if look {
		w.queueFast(t) // lists every short lock not listed yet, the fresh ones among them
	}
	maxHold := w.maxHoldNs()
	tol := l.tolerance()
	var (
		send  []*table.Entry
		moved map[*lane][]*table.Entry
		lost  []loss
		next  int64
	)
	wake := func(at int64) {
		if next == 0 || at < next {
			next = at
		}
	}
	t.Lock()
	l.mu.Lock()
	tick := w.nextTickNs(nowNs)
	retryDue := !now.Before(l.retryAt)
	budget := -1
	if l.down {
		budget = l.pipeKeys() // one pipeline tries the endpoint again
	}
	keep := l.due[:0]
	for _, e := range l.due {
		if e.Detached() {
			e.Dequeue()
			continue
		}
		if c.cluster {
			if o := c.owner(e); o != l && o != nil {
				if moved == nil {
					moved = make(map[*lane][]*table.Entry)
				}
				moved[o] = append(moved[o], e)
				continue
			}
		}
		inFlight := e.InFlight()
		if maxHold > 0 && nowNs-e.Obtained >= maxHold && !inFlight {
			if info, ok := t.Drop(e); ok {
				e.Dequeue()
				lost = append(lost, l.loss(e, info, ErrMaxHold))
				continue
			}
		}
		retry := e.Retrying()
		if since := nowNs - e.Confirmed; retry && since >= int64(e.TTL) && !inFlight {
			wait := min(lagFactor*int64(lag), int64(e.TTL))
			if since >= int64(e.TTL)+wait {
				if info, ok := t.Drop(e); ok {
					e.Dequeue()
					lost = append(lost, l.loss(e, info, l.unreachableLocked()))
					continue
				}
			} else {
				wake(e.Confirmed + int64(e.TTL) + wait)
			}
		}
		if !retry && !needsFast(e.TTL, e.Confirmed, tick, tol) {
			e.Dequeue() // the next tick is soon enough
			continue
		}
		keep = append(keep, e)
		// A process that runs late renews earlier, by lagFactor times its
		// lag (up to a sixth of the TTL): its renewal may wait that long
		// to be sent, and its answer to be read.
		due := e.Confirmed + int64(e.TTL)/3 - min(lagFactor*int64(lag), int64(e.TTL)/6)
		early := max(due-int64(e.TTL)/6, e.Confirmed+int64(e.TTL)/12)
		if retry {
			due, early = w.set.Since(l.retryAt), w.set.Since(l.retryAt)
			if deadline := e.Confirmed + int64(e.TTL); deadline > nowNs {
				wake(deadline) // when it may be given up; past it, the answer on its way or the wait for the lag wakes the loop
			}
		}
		if maxHold > 0 {
			wake(e.Obtained + maxHold)
		}
		switch {
		case e.InFlight():
			// Its renewal is on its way. Once it is renewed it is due
			// again in a third of its TTL; a failure wakes the loop.
			wake(nowNs + int64(e.TTL)/3)
		case e.Busy():
			// The holder's command is on its way: look again soon after.
			wake(max(due, nowNs+int64(2*time.Millisecond)))
		case nowNs >= early && (!retry || retryDue) && budget != 0:
			send = append(send, e)
			if budget > 0 {
				budget = max(budget-t.KeyCountLocked(e), 0)
			}
			wake(nowNs + int64(e.TTL)/3)
		case nowNs >= early && (!retry || retryDue):
			// The endpoint is down and one pipeline tries it again; its
			// answer wakes the loop.
			wake(nowNs + int64(retryDelay(e.TTL)))
		default:
			wake(due)
		}
	}
	if l.freshAt != 0 {
		wake(l.freshAt) // fresh locks obtained while this run went through the list
	}
	clear(l.due[len(keep):])
	l.due = keep
	l.dueLen.Store(int64(len(keep)))
	l.stale.Store(0)
	if cap(l.due) > 4*len(keep)+dueSlack {
		l.due = slices.Clip(slices.Clone(keep)) // the list shrank a lot: let its array go
	}
	order(send)
	if next == 0 {
		l.dueAt = time.Time{}
	} else {
		l.dueAt = w.set.At(next)
	}
	l.mu.Unlock()
	t.Unlock()

	for o, es := range moved {
		o.adopt(es)
	}
	l.lost.Add(int64(len(lost)))
	w.report(lost...)
	if !l.sendDue(send) {
		// Every pipeline is stuck on a stalled endpoint: look again soon.
		wake(nowNs + int64(50*time.Millisecond))
		t.Lock()
		l.dueAt = w.set.At(next)
		t.Unlock()
	}
	if next == 0 {
		return time.Time{}
	}
	return w.set.At(next)
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

// loss builds the report of e, a lock this lane gave up.
func (l *lane) loss(e *table.Entry, info table.Info, reason error) loss {
	return loss{e: e, t: l.c.t, info: info, reason: reason, endpoint: l.name}
}

// needsFast reports whether a lock confirmed at confirmed with ttl must be
// renewed before the tick at next (all in ns since the set's epoch): its
// deadline (a third of the TTL left, plus a twelfth as margin) comes before
// the tick, give or take tol.
func needsFast(ttl time.Duration, confirmed, next int64, tol time.Duration) bool {
	deadline := confirmed + int64(2*ttl/3-ttl/12)
	return deadline < next+int64(tol)
}
