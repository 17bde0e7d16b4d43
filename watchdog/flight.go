package watchdog

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

const (
	// maxCallBytes bounds the bytes of keys and values one renew call
	// makes Redis read (a call of one lock may pass it): locks with large
	// values (redislock's metadata) go in smaller calls, so that no call
	// holds Redis up for longer than a call of DefaultChunkSize small
	// locks does.
	maxCallBytes = 64 << 10
	// minHedge is the least time a call is waited for before it is hedged;
	// the lane waits at least four times its recent round trip too.
	minHedge = 5 * time.Millisecond
	// maxHedge is the most: a call of long locks is hedged after it.
	maxHedge = 5 * time.Second
)

// dispatch sends calls while the lane has fewer than its limit's worth
// in flight: the urgent locks first (in small calls), then the overdue
// ones, then whichever is more urgent of the ready queue's head and the
// sweep's offered call.
func (r *passRun) dispatch() {
	l := r.l
	if l.offered != nil && !r.answering {
		// The endpoint does not answer: the sweep leaves its locks to the
		// schedule (queueAll), where they are sent by urgency.
		l.offered = nil
		r.answer = -1
	}
	for l.paced < r.limit()*l.c.chunk {
		var p *pipe
		switch {
		case len(l.urgent) > 0:
			p = r.fill(&l.urgent, l.urgentN)
			if p != nil {
				p.hedge = true
			}
			if len(l.urgent) == 0 {
				l.urgent, l.urgentN = nil, l.c.chunk
			}
		case len(l.overdue) > 0:
			p = r.fill(&l.overdue, l.c.chunk)
			if len(l.overdue) == 0 {
				l.overdue = nil
			}
		case l.offered != nil && r.sweepFirst():
			p = l.offered
			l.offered = nil
			l.sweepSent += len(p.entries)
			r.answer = 1
		case len(l.ready) > 0:
			r.pullEarly()
			p = r.fillReady()
		default:
			return
		}
		if p == nil {
			r.blocked = true // no pipeline free: the end of one starts a pass
			return
		}
		r.prepare(p)
	}
	r.blocked = true
	if s, ok := l.ready.head(); ok && s.e.IsReady() {
		// readyWaited then, and the lane may send more calls. When that
		// time has passed, it sends as many as it may already: the end of
		// one starts a pass (a wake now would spin the scheduler on a CPU
		// until then).
		if at := renewAt(s.e, r.lag) + earlyBy(s.e.TTL); at > r.nowNs {
			r.wake(at)
		}
	}
	if l.offered != nil {
		// The sweep's next call waits behind the call in flight, which
		// may be slow to answer (up to its hedge time): when the sweep's
		// pace falls behind, its call goes beside it.
		r.wake(r.sweepLateAt())
	}
}

// limit is how many full calls' worth the lane may have in flight now
// (a hedge's smaller calls weigh their keys, see weigh): one while no
// lock waits for it, so that the application keeps the rest of its
// connection pool (a pool of 4 keeps 3) and calls carry more keys;
// pacedCalls, back to back, while deadlines need it: a hedge's locks are
// urgent, a lock has waited behind the call in flight a twelfth of its
// TTL (readyWaited), a lock is overdue; a sweep that must hurry
// (sweepLate) has l.sweepN (sweepCallsFor). More than a
// call's worth due is no such need while the call in flight answers in
// time: a second call sent for it held half of a pool of four through
// every storm of short locks (the application's open-loop p99 +3.9 ms
// with PoolSize 4 in the storm of 20,000 locks of 1.5 s, its p50 up to
// 1.6 ms higher), and the locks it carried were not late.
func (r *passRun) limit() int {
	l := r.l
	n := 1
	if len(l.urgent) > 0 || len(l.overdue) > 0 || r.readyWaited() {
		n = pacedCalls
	}
	if l.offered != nil && r.sweepLate() {
		n = max(n, l.sweepN)
	}
	return n
}

// sweepLate reports whether the sweep running needs a second call in
// flight: it is a Sweep call's (as fast as it may), or, at the pace it
// has kept so far, the locks it has yet to send would not all be sent by
// its sweepBy, half-way to the next tick. A tick's sweep sent two calls
// at a time while it had time to spare: with 100,000 locks of 30 s on
// "@every 2s" and PoolSize 4 (go run ./cmd/lockwatch-bench -cases
// neighbour) it held half of the pool through sweeps of 1.0-2.2 s, while
// the application's open loop needed about three of the four
// connections; the schedule's second call, sent the same way, cost a
// storm's open loop +3.9 ms (limit). Until a call has been sent the
// sweep's pace is unknown, and it is not late.
func (r *passRun) sweepLate() bool {
	l := r.l
	if l.sweepBy == 0 {
		return true
	}
	if l.sweepSent == 0 {
		return false
	}
	took := float64(r.nowNs - l.sweepFrom)
	return float64(r.nowNs)+took*r.sweepLeft()/float64(l.sweepSent) > float64(l.sweepBy)
}

// sweepLeft is how many locks the sweep running is expected to send yet,
// its offered call's at least.
func (r *passRun) sweepLeft() float64 {
	l := r.l
	return float64(max(l.sweepWant-l.sweepSent, len(l.offered.entries)))
}

// sweepLateAt is when, at the pace it has kept, the sweep running would
// become late (sweepLate) while no call of it ends: the earliest t with
// t + (t - sweepFrom) * left / sent past sweepBy. 0 (no wake) when the
// sweep is late already, or its pace is not known yet.
func (r *passRun) sweepLateAt() int64 {
	l := r.l
	if l.sweepBy == 0 || l.sweepSent == 0 || r.sweepLate() {
		return 0
	}
	left, sent := r.sweepLeft(), float64(l.sweepSent)
	at := int64((float64(l.sweepBy)*sent+float64(l.sweepFrom)*left)/(sent+left)) + 1
	return max(at, r.nowNs+int64(time.Millisecond))
}

// readyWaited reports whether the ready queue's most urgent lock has
// waited a twelfth of its TTL past its renewAt behind the call in flight,
// or will have by the time calls sent one at a time, each taking the
// recent answered round trip, have carried the ready queue: the call in
// flight is slow to end (a slow endpoint, or a process starved of CPU
// that reads its answer late), or more is due than one call at a time
// renews in time, and the locks due go in a call of their own. Without
// the second term a storm past one call's pace let every wave's backlog
// grow for a twelfth of the TTL before its second call went: 50,000
// locks of 1.5 s with a pool of four lost locks in 2 of 5 runs.
func (r *passRun) readyWaited() bool {
	l := r.l
	s, ok := l.ready.head()
	if !ok || !s.e.IsReady() || s.e.Detached() {
		return false
	}
	calls := int64((len(l.ready) + l.c.chunk - 1) / l.c.chunk)
	return r.nowNs+calls*int64(l.answeredLocked()) >= renewAt(s.e, r.lag)+earlyBy(s.e.TTL)
}

// earlyBy is how long before its renewAt a lock of ttl may join a call
// that has room for it: a twelfth of its TTL. The call a due lock starts
// carries the locks due soon after it, up to a chunk: fewer, fuller calls
// hold fewer of the application's connections, for less time, and cost
// Redis less per lock, and no lock waits past its renewAt for others.
func earlyBy(ttl time.Duration) int64 { return int64(ttl) / 12 }

// pullEarly moves into the ready queue, for the call about to go, the
// scheduled locks due within earlyBy of now, until the queue holds a
// call's worth: the earliest first, stopping at the first that may not
// go yet (a retry, one whose holder's command is on its way or whose
// renewal is, or one not due within its earlyBy).
func (r *passRun) pullEarly() {
	l := r.l
	for len(l.ready) < l.c.chunk {
		s, ok := l.wait.head()
		if !ok {
			return
		}
		e := s.e
		if !e.Queued() || s.gen != e.Gen() {
			l.wait.pop() // stale
			continue
		}
		if s.at-earlyBy(e.TTL) > r.nowNs || e.Retrying() || e.Busy() || e.InFlight() || e.Detached() {
			return
		}
		if r.budget--; r.budget < 0 {
			r.more = true
			return
		}
		l.wait.pop()
		r.pulling = true
		r.visit(e)
		r.pulling = false
	}
}

// sweepFirst reports whether the sweep's offered call goes before the
// ready queue's head: its most urgent lock expires first.
func (r *passRun) sweepFirst() bool {
	s, ok := r.l.ready.head()
	return !ok || r.l.offered.key <= s.at
}

// take takes e, out of a ready list, into p when it may be renewed now;
// it reports whether it did.
func (r *passRun) take(p *pipe, e *table.Entry) bool {
	l, t := r.l, r.l.c.t
	if !e.IsReady() {
		return false
	}
	l.unlist(e)
	e.Unready()
	switch {
	case e.Detached():
		e.Dequeue()
		return false
	case e.InFlight():
		return false // its call's answer schedules it again
	case e.Busy():
		l.schedule(e, r.nowNs+busyRecheck)
		return false
	case l.w.filtered(t, e):
		e.Dequeue()
		return false
	}
	p.entries = append(p.entries, e)
	return true
}

// fill fills a pipeline from list, in order, up to keys keys and
// maxCallBytes; nil when no pipeline is free.
func (r *passRun) fill(list *[]*table.Entry, keys int) *pipe {
	p := r.l.getPipe()
	if p == nil {
		return nil
	}
	t := r.l.c.t
	n, bytes := 0, 0
	i := 0
	for ; i < len(*list); i++ {
		e := (*list)[i]
		k, b := t.KeyCountLocked(e), callBytes(t, e)
		if len(p.entries) > 0 && (n+k > keys || bytes+b > maxCallBytes) {
			break
		}
		if r.take(p, e) {
			n, bytes = n+k, bytes+b
		}
	}
	clear((*list)[:i])
	*list = (*list)[i:]
	return p
}

// fillReady fills a pipeline from the ready queue, in tell order.
func (r *passRun) fillReady() *pipe {
	l, t := r.l, r.l.c.t
	p := l.getPipe()
	if p == nil {
		return nil
	}
	n, bytes := 0, 0
	for {
		s, ok := l.ready.head()
		if !ok {
			break
		}
		k, b := t.KeyCountLocked(s.e), callBytes(t, s.e)
		if len(p.entries) > 0 && (n+k > l.c.chunk || bytes+b > maxCallBytes) {
			break
		}
		l.ready.pop()
		if r.take(p, s.e) {
			n, bytes = n+k, bytes+b
		}
	}
	return p
}

// callBytes is what e costs a renew call: the bytes of its keys and of
// the values Redis compares (once per key).
func callBytes(t *table.Table, e *table.Entry) int {
	if !e.Multi() {
		return len(e.Key) + len(e.Value)
	}
	n := 0
	for _, k := range t.KeysLocked(e) {
		n += len(k) + len(e.Value)
	}
	return n
}

// prepare holds p's entries, builds its calls and counts it in flight,
// with the table and the lane locked; finish starts it. An empty pipeline
// (every entry taken by another call, released or busy) goes back.
func (r *passRun) prepare(p *pipe) {
	l, t := r.l, r.l.c.t
	p.entries = t.HoldLocked(p.entries)
	if len(p.entries) == 0 {
		l.putPipe(p)
		return
	}
	order(p.entries)
	p.build(t, l.c.chunk, r.nowNs, r.lag, r.tellLag)
	// A call is waited for no longer than its locks may be kept: past its
	// first lock's give-up time, that lock is given up once nothing is on
	// its way (I12), and is not held up by a call that does not answer.
	p.wait = l.hedgeWaitLocked(p, r.nowNs)
	if limit := time.Duration(p.giveUp - r.nowNs); limit < p.wait {
		p.wait = max(limit, minHedge)
	}
	// Nor, unless calls lately answered took that long, or the scheduler
	// runs that late, past half the time its first lock has left before
	// its key may expire: the call that replaces it has the other half.
	// The wait's floor is four round trips, and a hedge raises the round
	// trip to its whole wait: in a network outage every call after the
	// first was waited for up to its give-up time, past its locks' expiry,
	// and once the network healed nothing was sent for them however long
	// they had left (CI run 109: a 4 s lock's call, sent into an outage,
	// waited for 1.17 s and then its hedge to the give-up time; the lock
	// expired 2.5 s after the network came back). A network that answers
	// late keeps its answers waited for: its round trips are answered ones.
	if limit := max(time.Duration(p.expires-r.nowNs)/2, lagFactor*l.answeredLocked(), time.Duration(lagFactor*r.lag)); limit < p.wait {
		p.wait = max(limit, minHedge)
	}
	p.hedgeAt = r.nowNs + int64(p.wait)
	if p.sweep != nil {
		p.sweep.wg.Add(1)
		p.done = p.sweep.done
	}
	l.countMissed(p.missed)
	r.missed += p.missed
	p.state.Store(pipeRunning)
	l.flight = append(l.flight, p)
	p.weight = weigh(p, l.c.chunk)
	l.paced += p.weight
	r.calls = append(r.calls, p)
	r.wake(p.hedgeAt)
	r.wake(p.tellAt)
}

// weigh is what p counts against the lane's limit, in keys: a full
// call's worth (chunk), whatever it carries, but a hedge's smaller calls
// only their keys. So a hedge goes out as fast as the calls it replaces
// (its keys in a quarter of their size, in four times as many calls), and
// the locks due beside it are not held back behind calls that carry a
// quarter of theirs: at GOMAXPROCS=1, beside four spinning goroutines, a
// hedge's four calls of 25 kept the other 100 locks due with them waiting
// for 300 ms, past their expiry, and they were lost together.
func weigh(p *pipe, chunk int) int {
	if p.hedge {
		return min(len(p.entries), chunk)
	}
	return chunk
}

// hedgeWaitLocked is how long the lane waits for p before it hedges it:
// half the time its most urgent lock has left before its deadline (a
// third of its TTL left), at least minHedge, four recent round trips and
// lagFactor times the scheduler's lag, at most maxHedge; WithTimeout sets
// it instead. l.mu must be held.
func (l *lane) hedgeWaitLocked(p *pipe, now int64) time.Duration {
	if t := l.w.o.timeout; t > 0 {
		return t
	}
	// A process that runs late (starved of CPU) answers late itself: its
	// hedges would only add to what it cannot do.
	floor := max(minHedge, 4*l.rtt, time.Duration(lagFactor*l.lagNs.Load()))
	return min(max(floor, time.Duration(p.deadline-now)/2), maxHedge)
}

// dropFlightLocked takes p out of the calls in flight; l.mu must be held.
func (l *lane) dropFlightLocked(p *pipe) {
	for i, q := range l.flight {
		if q == p {
			last := len(l.flight) - 1
			l.flight[i] = l.flight[last]
			l.flight[last] = nil
			l.flight = l.flight[:last]
			l.paced -= p.weight
			return
		}
	}
}

// noteRTTLocked remembers a call's round trip: the largest of the recent
// ones, fading; l.mu must be held.
func (l *lane) noteRTTLocked(rtt time.Duration) {
	l.rtt, l.rttAt = fadeMax(l.rtt, l.rttAt, rtt)
}

// noteAnsweredLocked remembers the round trip of a call that was
// answered (noteRTTLocked too); l.mu must be held.
func (l *lane) noteAnsweredLocked(rtt time.Duration) {
	l.noteRTTLocked(rtt)
	l.answered, l.answeredAt = fadeMax(l.answered, l.answeredAt, rtt)
}

// answeredLocked is the recent round trip of answered calls, faded to
// now; l.mu must be held.
func (l *lane) answeredLocked() time.Duration {
	if l.answeredAt.IsZero() {
		return 0
	}
	return max(l.answered-time.Since(l.answeredAt)/lagDecay, 0)
}

// fadeMax adds rtt, seen now, to a largest-of-recent value last noted at
// at, which fades by a lagDecay-th of the time since.
func fadeMax(cur time.Duration, at time.Time, rtt time.Duration) (time.Duration, time.Time) {
	now := time.Now()
	if !at.IsZero() {
		cur = max(cur-now.Sub(at)/lagDecay, 0)
	}
	return max(cur, rtt), now
}

// start has p, prepared, sent by a sender goroutine (one that waits for a
// call, or a new one). The scheduler hedges it when it has not answered by
// its hedge time; its answer is applied whenever it comes. A Ring lane
// sends to its shard's client.
func (l *lane) start(p *pipe) {
	w, t := l.w, l.c.t
	if l.shard != "" {
		if sc := l.c.shardClient(l.shard); sc != nil {
			p.to = sc
		} else {
			p.toErr = fmt.Errorf("watchdog: ring shard %s is not live", l.shard)
		}
	}
	if p.toErr == nil && !l.c.cluster {
		target := p.to
		if target == nil {
			target = t.Client
		}
		if s := l.spareFor(target, p.hedge); s != nil {
			p.to = s
		}
	}
	select {
	case w.senders <- p: // a sender waits for a call: it takes this one
	default:
		w.io.Add(1)
		go w.sender(p)
	}
}

// senderIdle is how long a sender waits for its next call before it ends.
const senderIdle = 10 * time.Second

// sender sends p, then each call handed to it (lane.start), one at a
// time, until the watchdog stops or no call came for senderIdle. A
// goroutine started for each call allocated in the scheduler: in a process
// whose collector runs all the time (the starved holder at GOMAXPROCS=2,
// 200 MB/s of garbage), that allocation drafted the scheduler into the
// collector's mark termination 79 times in ten seconds, up to 84 ms each
// (runtime trace, 2026-12-02), while every call of its pass waited to
// start. Handing a call to a sender that waits for one allocates nothing.
func (w *Watchdog) sender(p *pipe) {
	defer w.io.Done()
	idle := time.NewTimer(senderIdle)
	defer idle.Stop()
	for {
		p.l.send(p)
		idle.Reset(senderIdle)
		select {
		case p = <-w.senders:
		case <-idle.C:
			return
		case <-w.ctx.Done():
			return
		}
	}
}

// send sends p, prepared, and applies its answer: whichever of its answer
// and its hedging (or Stop) comes first decides what is done with it.
func (l *lane) send(p *pipe) {
	w, t := l.w, l.c.t
	if d := startDelay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	began := t.Set().Now()
	stop := context.AfterFunc(w.ctx, func() { l.stopped(p) })
	p.run(w.ctx, t, pipelineDeadline(p.wait))
	stop()
	l.noteStartedLate(p, began)
	l.mu.Lock()
	answered := p.state.CompareAndSwap(pipeRunning, pipeFinished)
	if answered {
		l.dropFlightLocked(p)
		if p.failed < len(p.ends) { // a reply, not only errors
			l.noteAnsweredLocked(time.Since(p.sent))
		} else {
			l.noteRTTLocked(time.Since(p.sent))
		}
	}
	l.mu.Unlock()
	if !answered {
		l.lateEnd(p)
		return
	}
	done := p.done
	err := l.settle(p)
	l.putPipe(p)
	l.kickDue() // a call may go in its place
	if done != nil {
		done(err)
	}
}

// noteStartedLate logs, at Debug, a call whose goroutine began to send it
// at began, after the deadline of some of its locks that had not passed
// when it was built: the host did not run the goroutine in time (what the
// scheduler's own lateness, logged with the renewals it sends after their
// deadline, does not show). In local CI run 172 a worker's watchdog sent
// no renewal of a 200 ms lock for 160 ms while the process's meters saw
// 32 ms, and nothing said where the time went. It logs once the call has
// been sent: logging allocates, and an allocation before the send may
// draft the goroutine into the collector's work (TestBuildAllocatesNothing).
func (l *lane) noteStartedLate(p *pipe, began int64) {
	log := l.w.o.logger
	if !l.w.logging(slog.LevelDebug) {
		return
	}
	if n := p.lateSince(began); n > 0 {
		log.Debug("watchdog: renew call started after its locks' deadline", "endpoint", l.name, "locks", n,
			"call_started_late", time.Duration(began-p.built))
	}
}

// lateEnd ends p, a call hedged or given up when the watchdog stopped.
// Its answer is the truth about Redis all the same, and is applied; its
// error, when it has one, says more than "no answer in time".
func (l *lane) lateEnd(p *pipe) {
	if p.err != nil {
		l.lateError(p.err)
	}
	if p.failed < len(p.ends) { // an answer: how long round trips take now
		l.mu.Lock()
		l.noteAnsweredLocked(time.Since(p.sent))
		l.mu.Unlock()
	}
	if l.w.ctx.Err() == nil {
		if p.failed == len(p.ends) && connFailure(p.err) && p.markSent != math.MaxInt64 {
			// No answer, and a connection's failure: as far as the
			// watchdog can tell the call renewed nothing, and its locks'
			// keys live no longer for it (I5: a killed server's locks
			// are given up within their TTL; go-redis retries the
			// refused dial past the hedge wait).
			l.c.t.WithdrawLate(p.entries, p.marked, p.markSent)
		}
		l.settleLate(p)
	} else {
		l.c.t.EndLate(p.entries)
	}
	l.putPipe(p)
	l.kickDue() // its locks may be given up now, or retried
}

// stopped gives p up when the watchdog stops: its locks are no longer in
// flight, so that the holder's commands need not wait for it.
func (l *lane) stopped(p *pipe) {
	l.mu.Lock()
	if !p.state.CompareAndSwap(pipeRunning, pipeAbandoned) {
		l.mu.Unlock()
		return
	}
	l.dropFlightLocked(p)
	done := p.done
	p.done = nil
	es := slices.Clone(p.entries) // p stays in use by its goroutine
	l.mu.Unlock()
	l.c.t.Release(es, math.MaxInt64) // the watchdog stops: nothing is given up any more
	if done != nil {
		done(ErrStopped)
	}
}

// gaveUp is a call the scheduler stopped waiting for: hedged (its locks
// sent again at once) or, a hedge itself, given up (its locks retried). It
// is what finish needs of the call, read while the call could not end.
type gaveUp struct {
	hedged       bool
	calls, locks int
	wait         time.Duration
}

// count counts and logs g.
func (l *lane) count(g gaveUp) {
	w := l.w
	w.failures.Add(1)
	w.renewErrors.Add(int64(g.calls))
	err := errNoAnswer{g.wait}
	if g.hedged {
		l.hedges.Add(1)
		w.hedges.Add(1)
		w.o.logger.Warn("watchdog: renewal not answered in time; sent again", "endpoint", l.name, "locks", g.locks, "err", err)
	} else {
		l.failed.Add(int64(g.locks))
		w.o.logger.Warn("watchdog: renewal not answered in time; retrying", "endpoint", l.name, "locks", g.locks, "err", err)
	}
	w.each(func(o Observer) { o.RenewFailed(l.name, g.calls, err) })
	l.c.failed(l, err)
}

// offer hands p, a sweep's call, to the scheduler, and waits until it is
// sent (true) or refused because the endpoint does not answer (false: the
// sweep leaves the rest of its locks to the schedule). p.key must be the
// least tell key of its locks.
func (l *lane) offer(p *pipe, run *sweepRun) bool {
	p.sweep = run
	l.mu.Lock()
	if l.down || l.hedging {
		l.mu.Unlock()
		l.putPipe(p)
		return false
	}
	l.offered = p
	l.mu.Unlock()
	l.kickDue()
	select {
	case ok := <-l.taken:
		return ok
	case <-l.quit:
	case <-l.w.ctx.Done():
	}
	l.mu.Lock()
	withdrawn := l.offered == p
	if withdrawn {
		l.offered = nil
	}
	l.mu.Unlock()
	if withdrawn {
		l.putPipe(p)
		return false
	}
	return <-l.taken // the scheduler answered before it ended
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

// sweepPipe returns an idle pipeline for the sweep, waiting for one when
// every pipeline is in use; nil when the lane or the watchdog stops.
func (l *lane) sweepPipe() *pipe {
	if p := l.getPipe(); p != nil {
		return p
	}
	select {
	case p := <-l.pool:
		return p
	case <-l.quit:
	case <-l.w.ctx.Done():
	}
	return nil
}

// errNoAnswer is the cause of a renewal the watchdog stopped waiting for.
type errNoAnswer struct{ after time.Duration }

func (e errNoAnswer) Error() string {
	return fmt.Sprintf("watchdog: renewal gave no answer within %v", e.after)
}

// Timeout reports true: the renewal timed out.
func (e errNoAnswer) Timeout() bool { return true }
