package watchdog

import (
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// busyRecheck is how soon a lock whose holder's command was on its way
// (it decides) is looked at again.
const busyRecheck = int64(2 * time.Millisecond)

// passBudget bounds the scheduled locks one pass looks at (in the wait and
// ready heaps): a pass holds the table lock, which the application's lock
// commands need, and runs on a CPU its goroutines need. When more are due
// (thousands of short locks obtained together fall due together), the
// scheduler yields and runs another pass at once.
const passBudget = 1024

// A lane's schedule, all of it guarded by the table lock:
//
//   - wait: the locks that cannot wait for the next tick (the fast lane)
//     and the retries, each by the time it must be looked at again: when
//     a third of its TTL has passed (renewAt), or for a retry the lane's
//     retry time, its tell time and its give-up time, whichever comes
//     first.
//   - ready: the locks whose renewal is due, by their tell time: the one
//     whose key may expire first leaves first (earliest deadline first).
//   - overdue: ready locks whose tell time has passed (their holders were
//     told), in that order; they leave before the ready queue.
//   - urgent: the locks of hedged calls (and those renewed at once, see
//     Watchdog.contended); they leave first, in smaller calls.
//
// A pass of the scheduler (pass) hedges the calls in flight that have not
// answered when their most urgent lock needs an answer, tells the holders
// of locks not confirmed in time, moves the locks whose time came from
// wait to ready, and sends calls, the most urgent first, the sweep's among
// them, while the lane has fewer than pacedCalls full calls' worth in
// flight (a hedge's smaller calls weigh their keys). Calls go back to back
// as fast as Redis answers: every call's end starts a pass.

// passRun is one pass of a lane's scheduler.
type passRun struct {
	l         *lane
	nowNs     int64
	lag       int64 // the scheduler's recent lag, in ns
	starve    int64 // the larger of lag and how late the scheduler runs once kicked (unreadSent)
	runWait   int64 // how long the process's goroutines waited for a CPU lately (unreadSent)
	wakeLag   int64 // how late the wake probe was woken lately (unreadSent, tellLag)
	tellLag   int64 // the lateness tell times allow for: the largest of starve, runWait and the wake probe's
	refusing  bool  // the endpoint refused or dropped connections since its last success (unreadSent)
	maxHold   int64
	tick      int64 // the next tick
	tol       time.Duration
	retryAt   int64 // the lane's retry time
	answering bool  // the endpoint answers: not down, no call hedged since the last answer in time
	blocked   bool  // no more calls could be sent: the lane has as many as it may
	retire    bool  // the lane has been idle for idleRetire: its client may give its lanes back
	// retireIfClosed: the lane has been idle for idleRetire but its
	// endpoint is down: its client may give its lanes back if it is closed.
	retireIfClosed bool
	budget         int  // scheduled locks this pass may still look at
	more           bool // the budget ran out: another pass follows at once

	lost  []loss
	tells []*table.Entry
	moved map[*lane][]*table.Entry
	// rehomed: the locks rehome handed over, renewed at once by their
	// new lanes.
	rehomed map[*lane][]*table.Entry
	calls   []*pipe  // built, to be started
	gaveUp  []gaveUp // calls hedged or given up waiting for, to count and log
	dones   []func(error)
	answer  int // to an offered sweep call: 0 none, 1 taken, -1 refused
	next    int64
	// pulling: visit looks at a lock up to its earlyBy before its renewAt
	// (pullEarly).
	pulling bool
	// For the log of a late tell (logLateTells): how long the pass waited
	// for the table lock, and how long since the pass before began.
	lockWait  time.Duration
	sincePass time.Duration
	// missed counts the locks of the calls this pass sent after their
	// deadline (logged with the figures above).
	missed int
}

// pass runs the lane's scheduler once at now, with lag its recent lag,
// and returns when it must run again (zero: when kicked).
func (l *lane) pass(now time.Time, lag, starve time.Duration) time.Time {
	l.passes.Add(1)
	w, t := l.w, l.c.t
	// Renewals settled, hedge waits and a group's tells count the larger
	// (a starved process renews earlier and waits longer before it sends
	// a call again); give-ups count the timer's lag alone, so that a
	// silent endpoint's locks are given up in time (I5).
	l.lagNs.Store(int64(max(lag, starve)))
	r := &passRun{l: l, nowNs: w.set.Since(now), lag: int64(lag), starve: int64(starve), runWait: int64(w.runWait.get(now)), maxHold: w.maxHoldNs(), tol: l.tolerance(), budget: passBudget}
	// The calls and tells go in the lane's buffers: prepare and visit
	// append to them with the table locked, where an allocation may draft
	// the scheduler into the collector's work (TestBuildAllocatesNothing).
	r.calls, r.tells = l.calls[:0], l.tells[:0]
	r.wakeLag = w.wakeLag.Load()
	r.tellLag = max(r.starve, r.runWait, r.wakeLag)
	l.tellLagNs.Store(r.tellLag)
	l.lookFresh(r.nowNs)
	t.Lock()
	// The pass counts from when it holds the table lock: a holder of it
	// that its host did not run (or a long hook) may have kept the pass
	// waiting, and a pass that counted from before the wait would find
	// nothing due that came due meanwhile, and leave it to the next.
	locked := time.Now()
	r.lockWait = locked.Sub(now)
	r.nowNs = w.set.Since(locked)
	if !l.lastPass.IsZero() {
		r.sincePass = now.Sub(l.lastPass)
	}
	l.lastPass = now
	l.mu.Lock()
	l.inPass = true
	r.refusing = connFailure(l.cause)
	r.tick = w.nextTickNs(r.nowNs)
	l.compactLocked()
	if l.rehome.Swap(false) {
		r.rehome()
	}
	r.flights()
	r.retryAt = w.set.Since(l.retryAt) // a call given up sets it
	r.answering = !l.down && !l.hedging
	r.retell()
	r.drainWait()
	r.drainReady()
	r.watchLists()
	r.dispatch()
	r.checkIdle()
	r.wakeTimes()
	l.dueAt = r.nextTime()
	l.size.Store(int64(len(l.wait) + len(l.ready) + len(l.overdue) + len(l.urgent)))
	l.inPass = false
	l.mu.Unlock()
	t.Unlock()
	return r.finish()
}

func (r *passRun) wake(at int64) {
	if at > 0 && at < math.MaxInt64 && (r.next == 0 || at < r.next) {
		r.next = at
	}
}

func (r *passRun) nextTime() time.Time {
	if r.next == 0 {
		return time.Time{}
	}
	return r.l.w.set.At(r.next)
}

// flights hedges the calls in flight whose hedge time has come and tells
// the holders of their locks whose tell time has come.
func (r *passRun) flights() {
	l := r.l
	for i := 0; i < len(l.flight); {
		p := l.flight[i]
		if p.hedge && superseded(p) && p.state.CompareAndSwap(pipeRunning, pipeAbandoned) {
			l.dropFlightLocked(p)
			r.supersede(p)
			continue
		}
		hedgeAt := hedgeTime(p, r.nowNs)
		if hedgeAt <= r.nowNs && p.state.CompareAndSwap(pipeRunning, pipeAbandoned) {
			l.dropFlightLocked(p)
			l.noteRTTLocked(p.wait) // a round trip takes that long at least: the next call waits longer
			if p.hedge {
				r.abandon(p)
			} else {
				r.hedge(p)
			}
			continue
		}
		if r.tellLag > p.tellLag && p.tellAt < math.MaxInt64 {
			// The lag grew since p's tell time was computed: its locks
			// are told that much earlier (tellMargin; tellCall finds the
			// exact times, its cap included).
			p.tellAt -= lagFactor * (r.tellLag - p.tellLag)
			p.tellLag = r.tellLag
		}
		if p.tellAt <= r.nowNs {
			r.tellCall(p)
		}
		r.wake(hedgeAt)
		r.wake(p.tellAt)
		i++
	}
}

// hedgeTime is when p is hedged if it has not answered: its wait after
// it was sent, not after it was built. In a process starved of CPU a
// call's goroutine may start tens of milliseconds after the scheduler
// built it (at GOMAXPROCS=2 beside four spinning goroutines, 38 ms), and
// a call hedged before its first attempt went out only doubles what the
// process cannot do: its hedges start just as late, and its locks were
// lost together. A call not sent yet is looked at again minHedge later.
// Never past its first lock's give-up time (see prepare): a call that
// does not answer holds no give-up up, however late it was sent.
func hedgeTime(p *pipe, now int64) int64 {
	at := now + int64(minHedge)
	if sent := p.sentNs.Load(); sent != 0 {
		at = sent + int64(p.wait)
	}
	return max(p.hedgeAt, min(at, p.giveUp))
}

// superseded reports whether every lock of p, a hedge in flight, has
// been confirmed since p was built: the call p sends again answered late,
// and renewed them. p's wait was computed for deadlines that have passed
// (its floor is lagFactor times the lag: hundreds of milliseconds in a
// starved process), and while it is in flight its locks cannot be sent
// again: at GOMAXPROCS=1 beside four spinning goroutines, hedges on new
// connections did not answer for 350 ms while the late answer of the call
// they replaced had renewed their locks, which then expired in them.
// The table must be locked.
func superseded(p *pipe) bool {
	some := false
	for i, e := range p.entries {
		if e.Detached() {
			continue
		}
		if deadlineOf(e) <= p.dls[i] {
			return false
		}
		some = true
	}
	return some
}

// supersede stops waiting for p, a hedge superseded: its locks are
// scheduled as renewed ones are, and its answer, should it come, is still
// applied (settleLate). Nothing failed: no failure is noted.
func (r *passRun) supersede(p *pipe) {
	l := r.l
	r.release(p)
	for _, e := range p.entries {
		if e.Detached() || e.IsReady() {
			continue
		}
		l.schedule(e, renewAt(e, r.lag))
	}
	r.endSweepCall(p)
}

// hedge gives up waiting for p, which has not answered by its hedge time:
// its locks are sent again at once, in calls a quarter of its size (none
// smaller than a quarter of a full call, unless p was: hedgeKeys), on
// other connections (p holds its own until it ends), while p's answer,
// should it come, is still applied (settleLate). Until it ends, p is late:
// its locks are not given up, and a refresh to a shorter TTL waits for it.
func (r *passRun) hedge(p *pipe) {
	l := r.l
	r.release(p)
	keys := hedgeKeys(p.callKeys, l.c.chunk)
	minTTL := time.Duration(0)
	for _, e := range p.entries {
		if e.Detached() {
			continue
		}
		if minTTL == 0 || e.TTL < minTTL {
			minTTL = e.TTL
		}
		e.Fail() // tried without an answer: it may be given up (a renewed answer clears it)
		l.makeUrgent(e, keys)
	}
	l.hedging = true
	l.noteFailureLocked(errNoAnswer{p.wait}, minTTL, false)
	r.gaveUp = append(r.gaveUp, gaveUp{hedged: true, calls: len(p.ends), locks: len(p.entries), wait: p.wait})
	r.endSweepCall(p)
}

// hedgeKeys is how many keys each call of a hedge of a call of callKeys
// carries, for calls of at most chunk: a quarter of callKeys, so that no
// hedge decides more than a quarter of what the call it replaces would
// have (I16), but at least a quarter of chunk, or callKeys when fewer.
// Each call takes a connection: a hedge of a few locks in calls of one or
// two took as many connections as it had calls, dialled new ones (a
// handshake costs a turn of the process's goroutines, 95 ms in a process
// starved of CPU) or waited for the pool, and its locks expired in them
// (TestSmallCallHedgedWhole).
func hedgeKeys(callKeys, chunk int) int {
	return max(1, callKeys/4, min(callKeys, chunk/4))
}

// release lets p's locks go (table.ReleaseLocked), noting what its end
// may take back (Lane.lateEnd).
func (r *passRun) release(p *pipe) {
	p.markSent = r.unreadSent(p)
	p.marked = r.l.c.t.ReleaseLocked(p.entries, p.markSent, p.marked)
}

// unreadSent is what ReleaseLocked needs of p, a call the lane stops
// waiting for: its send time when the process's own lateness could
// account for the missing answer (Redis may have renewed its locks and
// the answer wait unread, so their keys may live a TTL past it, I12):
// lagFactor times the larger of the scheduler's lag and how late it runs
// once kicked is at least half the wait, or the process's goroutines have
// lately waited, runnable, a quarter of the wait for a CPU, or been woken
// that late (runWait, wakeLag: the goroutines that write the calls and
// read their answers may wait while the scheduler runs on time, and an
// answer takes several of their turns to be read; at GOMAXPROCS=1 beside
// four spinning goroutines, waits of 226 ms went unanswered with a
// runWait of 57 ms while Redis had applied the calls, and CI run 24 gave
// up 130 locks after a wait of 15.6 ms).
// Else math.MaxInt64: an endpoint that does not answer in time while the
// process runs on time renewed nothing the watchdog can count on, and its
// locks are given up once their TTL has passed (I5). So also while the
// endpoint refuses or drops connections (a connection error, not a
// timeout, since its last success): its silence is its own, however late
// the process runs; and a call noted as maybe applied that ends with such
// an error, and no answer, takes it back (lane.lateEnd): go-redis retries
// a refused dial past the hedge wait, and under load a killed Redlock
// server's copy was kept up to 1.98 s after the kill
// (TestRedlockServersKilled, CI run 27 and 2 of 8 runs beside four CPU
// burners).
func (r *passRun) unreadSent(p *pipe) int64 {
	if r.refusing || 2*lagFactor*r.starve < int64(p.wait) && lagFactor*max(r.runWait, r.wakeLag) < int64(p.wait) {
		return math.MaxInt64
	}
	return p.sentBy(r.nowNs)
}

// abandon gives up waiting for p, a hedge that has not answered by its
// own hedge time either: the endpoint does not answer. Its locks are
// retried when the lane's retry time comes, as after a failure, while p's
// answer, should it come, is still applied.
func (r *passRun) abandon(p *pipe) {
	l := r.l
	r.release(p)
	minTTL := time.Duration(0)
	for _, e := range p.entries {
		if e.Detached() {
			continue
		}
		if minTTL == 0 || e.TTL < minTTL {
			minTTL = e.TTL
		}
		if e.IsReady() {
			continue // urgent again: it goes out soon
		}
		e.Fail()
		l.schedule(e, r.nowNs)
	}
	l.noteFailureLocked(errNoAnswer{p.wait}, minTTL, true)
	r.gaveUp = append(r.gaveUp, gaveUp{calls: len(p.ends), locks: len(p.entries), wait: p.wait})
	r.endSweepCall(p)
}

// endSweepCall ends p, a call given up, for the sweep it belongs to.
func (r *passRun) endSweepCall(p *pipe) {
	if p.done != nil {
		r.dones = append(r.dones, p.done)
		p.done = nil
	}
}

// tellCall tells the holders of p's locks whose tell time has come, and
// sets p's tell time to the next one.
func (r *passRun) tellCall(p *pipe) {
	next := int64(math.MaxInt64)
	for _, e := range p.entries {
		if e.Detached() {
			continue
		}
		if at := tellAt(e, r.tellLag); at <= r.nowNs {
			r.tell(e)
		} else {
			next = min(next, at)
		}
	}
	p.tellAt, p.tellLag = next, r.tellLag
}

// tell records that e's holder is to be told its lock may be lost (once
// per confirmation; finish tells it).
func (r *passRun) tell(e *table.Entry) {
	if r.l.c.t.TellLocked(e) {
		r.tells = append(r.tells, e)
	}
}

func (r *passRun) tellIfDue(e *table.Entry) {
	if tellAt(e, r.tellLag) <= r.nowNs {
		r.tell(e)
	}
}

// drainWait looks at the scheduled locks whose time has come.
func (r *passRun) drainWait() {
	l := r.l
	for {
		s, ok := l.wait.head()
		if !ok || s.at > r.nowNs {
			return
		}
		if r.budget--; r.budget < 0 {
			r.more = true
			return
		}
		l.wait.pop()
		if s.e.Queued() && s.gen == s.e.Gen() { // otherwise the slot is stale
			r.visit(s.e)
		}
	}
}

// visit decides about e, a scheduled lock whose time has come: it leaves
// the schedule (untracked, moved to another node's lane, past its max
// hold, given up, renewed by a call already, or the next tick is soon
// enough), waits some more, or is ready to be renewed.
func (r *passRun) visit(e *table.Entry) {
	l := r.l
	switch {
	case e.Detached():
		l.unlist(e)
		e.Dequeue()
		return
	case r.movedAway(e), r.maxHeld(e):
		return
	case e.InFlight():
		l.unlist(e) // its call's answer schedules it again
		e.Unqueue()
		return
	case e.Busy():
		// The holder's command decides the lock's fate first, but not
		// when its holder hears: a refresh on its way may land after the
		// key expired, and the job must stop before anyone else can take
		// the key (I15). A release on its way needs no tell: its job has
		// ended, and it hears how the release went.
		if l.c.t.RefreshingLocked(e) {
			r.tellIfDue(e)
		}
		l.requeue(e, r.nowNs+busyRecheck)
		return
	}
	if e.Retrying() {
		if r.givenUp(e) {
			return
		}
		r.tellIfDue(e)
		if r.nowNs < r.retryAt {
			l.requeue(e, min(r.retryAt, r.checkAt(e)))
			r.noteTellSlot(e)
			return
		}
	} else {
		r.tellIfDue(e)
		if at := renewAt(e, r.lag); r.nowNs < at && !(r.pulling && r.nowNs >= at-earlyBy(e.TTL)) {
			l.requeue(e, min(at, r.holdEnd(e)))
			return
		}
		if !needsFast(e.TTL, e.Confirmed, r.tick, r.tol) {
			l.unlist(e) // the next tick is soon enough
			e.Dequeue()
			return
		}
	}
	e.MakeReady()
	l.ready.push(tellKey(e), e, 0)
}

// rehome hands every scheduled lock whose slot moved to another node to
// that node's lane (movedAway), rather than when its time comes: the new
// lane renews it at once (lane.adopt). A lock of 15 s on a master killed
// and failed over was otherwise renewed on the promoted replica only when
// it fell due, up to a third of its TTL later (TestClusterMasterKilled
// failed for it in an experiment that renewed at half the TTL: 4.7 s
// after the promotion). The router asks for it when a slot moved between
// two nodes, which is seldom: a pass then looks at every scheduled lock.
func (r *passRun) rehome() {
	l := r.l
	if !l.c.cluster {
		return
	}
	for _, s := range l.wait {
		if e := s.e; e.Queued() && s.gen == e.Gen() && !e.Detached() {
			r.handOver(e, &r.rehomed)
		}
	}
}

// movedAway hands e to the lane of the node that serves its slot now, on
// a cluster whose slots moved.
func (r *passRun) movedAway(e *table.Entry) bool { return r.handOver(e, &r.moved) }

// handOver hands e, on a cluster, to the lane of the node that serves its
// slot now, if that is another lane, listing it in to.
func (r *passRun) handOver(e *table.Entry, to *map[*lane][]*table.Entry) bool {
	l := r.l
	if !l.c.cluster {
		return false
	}
	o := l.c.owner(e)
	if o == l || o == nil {
		return false
	}
	l.unlist(e)
	e.Unqueue()
	if *to == nil {
		*to = make(map[*lane][]*table.Entry)
	}
	(*to)[o] = append((*to)[o], e)
	return true
}

// maxHeld ends e when it has reached its max hold (unless a renewal of it
// is on its way: its answer comes first).
func (r *passRun) maxHeld(e *table.Entry) bool {
	if r.maxHold <= 0 || r.nowNs-e.Obtained < r.maxHold || e.InFlight() {
		return false
	}
	return r.drop(e, ErrMaxHold)
}

// drop untracks e, scheduled, and reports it lost for reason; false when
// it cannot be dropped (the holder's command decides).
func (r *passRun) drop(e *table.Entry, reason error) bool {
	l := r.l
	info, ok := l.c.t.Drop(e)
	if !ok {
		return false
	}
	l.unlist(e)
	e.Dequeue()
	l.forgetFresh(e)
	if reason == nil {
		reason = l.unreachableLocked()
	}
	r.lost = append(r.lost, l.loss(e, info, reason))
	return true
}

// givenUp gives e, a retry, up once its give-up time has come (see
// giveUpTime): the caller has ruled out a renewal in flight. Until then it
// is retried, past E too: a renewal whose answer did not come may have
// been applied, and its key may still be held. A retry then renews it
// (and confirms it), or finds it gone or taken and says so at once. Past
// E the lane used to wait for a late answer only: locks of 300 ms whose
// renewals Redis applied while their answers were lost were given up as
// unreachable at the give-up time while Redis held their keys for 250 ms
// more (TestRetriedWhileKeyMayLive), and under load a worker's lock was
// left waiting 185 ms for its give-up time with 1 ms left on its key.
func (r *passRun) givenUp(e *table.Entry) bool {
	if r.nowNs < r.giveUpTime(e) {
		return false
	}
	return r.drop(e, nil)
}

// giveUpTime is giveUpTime for this pass.
func (r *passRun) giveUpTime(e *table.Entry) int64 { return giveUpTime(r.l.c.t, e, r.lag) }

// checkAt is when a retry waiting for the lane's retry time must be
// looked at anyway: its tell time, its give-up time, its max hold.
func (r *passRun) checkAt(e *table.Entry) int64 {
	at := min(r.giveUpTime(e), r.holdEnd(e))
	if !r.l.c.t.ToldLocked(e) {
		at = min(at, tellAt(e, r.tellLag))
	}
	return max(at, r.nowNs+1)
}

// noteTellSlot notes that e, a retry just given a slot in the wait heap
// (checkAt), has its tell time to come, computed for this pass's lag.
func (r *passRun) noteTellSlot(e *table.Entry) {
	l := r.l
	if l.c.t.ToldLocked(e) {
		return
	}
	if !l.tellSlots || r.tellLag < l.tellSlotLag {
		l.tellSlotLag = r.tellLag
	}
	l.tellSlots = true
}

// retellStep is how much the lag must have grown before retell moves the
// retries' tell times earlier: a quarter of a millisecond (tell times a
// millisecond earlier, tellSlack), so that a lag that grows a little at a
// time does not make every pass look at every slot.
const retellStep = int64(tellSlack) / lagFactor

// retell moves the wait heap's slots of retries whose holders were not
// told earlier, to their tell time for this pass's lag, when the lag grew
// since those were computed. A retry waiting for the lane's retry time
// waits in the wait heap until its tell time at the latest (checkAt), and
// that time is earlier by lagFactor times any growth of the lag: a slot
// left where it was told its holder that much later, after its key could
// be taken (TestToldByTellTimeWhenLagGrows; CI run 27 told two jobs 3.9
// ms after E, while the locks still in a call, whose tell times follow
// the lag (flights), were told 9.7 ms before it). Only while an endpoint
// fails are there such slots; then the heap is looked at once per growth.
func (r *passRun) retell() {
	l := r.l
	if !l.tellSlots || r.tellLag < l.tellSlotLag+retellStep {
		return
	}
	t := l.c.t
	moved, left := false, false
	for i := range l.wait {
		s := &l.wait[i]
		e := s.e
		if !e.Queued() || s.gen != e.Gen() || e.Detached() || !e.Retrying() || t.ToldLocked(e) {
			continue
		}
		left = true
		if at := max(tellAt(e, r.tellLag), r.nowNs); at < s.at {
			s.at = at
			moved = true
		}
	}
	if moved {
		for i := len(l.wait)/2 - 1; i >= 0; i-- {
			l.wait.down(i)
		}
	}
	l.tellSlots, l.tellSlotLag = left, r.tellLag
}

// holdEnd is when e reaches its max hold.
func (r *passRun) holdEnd(e *table.Entry) int64 {
	if r.maxHold <= 0 {
		return math.MaxInt64
	}
	return e.Obtained + r.maxHold
}

// drainReady moves the ready locks whose tell time has come to the
// overdue list, telling their holders.
func (r *passRun) drainReady() {
	l := r.l
	for {
		s, ok := l.ready.head()
		if !ok || s.at-tellMargin(s.e.TTL, r.tellLag) > r.nowNs {
			return
		}
		if r.budget--; r.budget < 0 {
			r.more = true
			return
		}
		l.ready.pop()
		e := s.e
		switch {
		case !e.IsReady():
		case e.Detached():
			l.unlist(e)
			e.Dequeue()
		case tellAt(e, r.tellLag) > r.nowNs:
			l.ready.push(tellKey(e), e, 0) // confirmed since it was listed
		default:
			r.tell(e)
			l.overdue = append(l.overdue, e)
		}
	}
}

// watchLists tells the holders of the urgent and overdue locks whose tell
// time has come and, while the endpoint does not answer, gives up those
// tried without an answer past their give-up time, with no renewal on its
// way; it wakes the scheduler when the next of those times comes, should
// no call end first. The lists are not in tell order (a hedge appends its
// call's locks, one call after another), so every lock in them is looked
// at: a lock further down with an earlier tell time was told only when
// something else woke the scheduler, up to 50 ms after its key could
// expire (TestToldBeforeExpiryAfterJitter). While the endpoint answers,
// only the urgent list is looked at: it fills only when calls are hedged
// or a lock is renewed at once.
func (r *passRun) watchLists() {
	l := r.l
	if len(l.urgent) == 0 && (r.answering || len(l.overdue) == 0) {
		return
	}
	t := l.c.t
	gone := func(e *table.Entry) bool {
		if e.Detached() || !e.IsReady() {
			if e.IsReady() {
				l.unlist(e)
				e.Dequeue()
			}
			return true
		}
		r.tellIfDue(e)
		if at := tellAt(e, r.tellLag); at > r.nowNs && !t.ToldLocked(e) {
			r.wake(at)
		}
		if r.answering || e.InFlight() {
			return false // a call goes, or is on its way: Redis tells
		}
		at := r.giveUpTime(e)
		if e.Retrying() && r.nowNs >= at {
			return r.drop(e, nil)
		}
		// A lock never tried is sent (Redis tells); a retry waits for its
		// give-up time.
		r.wake(max(at, r.nowNs+int64(retryDelay(e.TTL))))
		return false
	}
	if !r.answering {
		// While the endpoint answers, the overdue locks need no look:
		// their holders were told as they became overdue (drainReady),
		// and they leave as calls go. A storm past capacity holds
		// thousands of them, and a pass runs at each call's end.
		l.overdue = slices.DeleteFunc(l.overdue, gone)
	}
	l.urgent = slices.DeleteFunc(l.urgent, gone)
}

// checkIdle notes whether the lane has nothing to do and its client tracks
// no lock: after idleRetire of that, its client may give its lanes back.
func (r *passRun) checkIdle() {
	l := r.l
	if l.c.t.LenLocked() != 0 || !l.idleLocked() {
		l.idleSince = 0
		return
	}
	if l.idleSince == 0 {
		l.idleSince = r.nowNs
	}
	wait := idleRetire
	if l.down {
		wait = downRetire
		// A down endpoint stays listed (see downRetire) while its client
		// lives; once the application has closed the client, it is given
		// back like an idle one. Whether it has is asked every idleRetire,
		// after the pass (closedNow runs the client's hooks).
		if at := l.idleSince + int64(idleRetire); r.nowNs >= at {
			r.retireIfClosed = true
			r.wake(r.nowNs + int64(idleRetire))
		} else {
			r.wake(at)
		}
	}
	if at := l.idleSince + int64(wait); r.nowNs >= at {
		r.retire = true
	} else {
		r.wake(at)
	}
}

// wakeTimes makes sure the scheduler runs again when a scheduled lock's
// time comes and when a ready lock's holder must be told while no call can
// be sent (a call's end starts a pass by itself; watchLists wakes it for
// the urgent and overdue locks).
func (r *passRun) wakeTimes() {
	l := r.l
	if s, ok := l.wait.head(); ok {
		r.wake(max(s.at, r.nowNs+1))
	}
	if s, ok := l.ready.head(); ok {
		r.wake(max(s.at-tellMargin(s.e.TTL, r.tellLag), r.nowNs+1))
	}
	if l.freshAt != 0 {
		r.wake(l.freshAt)
	}
}

// finish, with no lock held, starts the calls built, hands the locks whose
// slot moved to their lanes, tells the holders of the locks not confirmed
// in time, reports the locks given up, and answers the sweep; it returns
// when the scheduler must run again.
func (r *passRun) finish() time.Time {
	l := r.l
	for _, p := range r.calls {
		l.start(p)
	}
	clear(r.calls)
	l.calls = r.calls[:0]
	for o, es := range r.moved {
		o.adopt(es, false)
	}
	for o, es := range r.rehomed {
		o.adopt(es, true)
	}
	// Told before given up: a lock whose tell time and give-up time both
	// passed before this pass (its scheduler held up) is told first, so
	// that its holder hears, and the tell is counted, as for any lock
	// not confirmed in time; OnLost follows (local run: a lock told and
	// given up in one pass, its context cancelled by the loss, counted
	// as told but not as told late, nor logged).
	r.logLateTells(l.w.tellUnconfirmed(l, r.tells))
	clear(r.tells)
	l.tells = r.tells[:0]
	l.lost.Add(int64(len(r.lost)))
	l.w.report(r.lost...)
	if r.missed > 0 && l.w.logging(slog.LevelDebug) {
		// At Debug: a storm past capacity sends such calls one after
		// another. The figures say whether the scheduler ran late.
		l.w.o.logger.Debug("watchdog: renewals sent after their deadline", "endpoint", l.name, "locks", r.missed,
			"scheduler_woke_late", l.wokeLate, "table_lock_wait", r.lockWait, "since_last_pass", r.sincePass)
	}
	for _, g := range r.gaveUp {
		l.count(g)
	}
	for _, done := range r.dones {
		done(errNoAnswer{})
	}
	switch r.answer {
	case 1:
		l.taken <- true
	case -1:
		l.taken <- false
	}
	l.yield = r.more
	if r.more {
		l.kickDue() // the scheduler yields first (see scheduler)
	}
	if r.retire || r.retireIfClosed && l.c.closedNow() {
		l.c.retire()
	}
	return r.nextTime()
}

// logLateTells logs the holders this pass told after their lock's tell
// key (late: E minus Redlock's drift allowance, the bound of I15), with
// what the pass can say of why: how late the scheduler woke for it (its
// timer, or the kick that asked for it: a process, or one of its threads,
// not run by its host), how long it waited for the table lock, and how
// long since the pass before. A tell time that no wake covered would show
// as a late tell with none of these late.
func (r *passRun) logLateTells(late lateTell) {
	if late.n == 0 || !r.l.w.logging(slog.LevelWarn) {
		return
	}
	l := r.l
	l.w.o.logger.Warn("watchdog: holders told after their lock's deadline (E minus the drift allowance)",
		"endpoint", l.name, "locks", late.n, "key", late.key, "late_by", late.by,
		"scheduler_woke_late", l.wokeLate, "table_lock_wait", r.lockWait, "since_last_pass", r.sincePass)
}
