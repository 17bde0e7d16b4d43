package watchdog

import (
	"context"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
	"github.com/redis/go-redis/v9"
)

const (
	// pacedCalls is how many full renew calls' worth (each of at most
	// DefaultChunkSize keys and maxCallBytes bytes; a hedge's smaller
	// calls weigh their keys, see weigh) one endpoint has in flight at
	// most, the sweep's and the schedule's together: two while deadlines
	// need it (see passRun.limit), so that Redis has the next call as soon
	// as it is done with one (a call of 100 keys holds it for about 0.4
	// ms) and serves the application's commands between them; one
	// otherwise.
	pacedCalls = 2
	// sweepCalls is how many a sweep that must hurry (a Sweep call, or a
	// tick's sweep behind its pace) has in flight on an endpoint whose
	// pool holds sweepPool connections or more: with two, Redis waited
	// for the client's next call up to a tenth of a sweep (a sweep of
	// 100,000 took 1.02-1.15 times the Redis CPU it cost); with three,
	// 1.01-1.04, and the sweep went from 1.08-1.32 to 1.30-1.42 times
	// Redisson-style's speed, run in turn (BENCHMARKS.md, "Throughput",
	// 2026-12-03). A smaller pool keeps pacedCalls: the application keeps
	// at least half of it.
	sweepCalls = 3
	sweepPool  = 8
	// maxPipes bounds the pipelines an endpoint has at all: those in
	// flight, those hedged but not yet answered (a stalled server) and
	// idle ones. When none is free, nothing more is sent until one ends.
	maxPipes = 16
	// clusterSegment is how many locks a cluster lane lists and sorts by
	// slot at a time, so that locks of one slot share calls.
	clusterSegment = 1 << 17
	// smallTable is the number of locks under which an endpoint keeps no
	// idle pipeline larger than smallPipe entries between sweeps.
	smallTable = 16000
	smallPipe  = 256
	// tickTolerance covers the difference between the tick time the
	// watchdog predicts and the one a lock's renewal really starts at (cron
	// wakes a little late); a lane adds how long its last sweep took.
	tickTolerance = time.Second
	// dialProbeTimeout bounds the dial that looks for why an endpoint does
	// not answer.
	dialProbeTimeout = time.Second
	// lagFactor: the process's own scheduling delay (lag: how late the
	// scheduler's timer wakes it, decaying) counts lagFactor times where a
	// deadline must allow for it. A lock is renewed that much earlier (up
	// to a sixth of its TTL), its holder is told that much before its key
	// may expire (up to a quarter of its TTL), and it is given up only
	// once its TTL since its last confirmation has passed by that much
	// (up to a second TTL): an answer that would confirm it may be waiting
	// unread while the process is starved of CPU.
	lagFactor = 4
	// lagDecay is how fast the round trip the lane remembers fades: by
	// 1/lagDecay of the time since it was last measured.
	lagDecay = 4
	// lagMemory is how fast the scheduler's lag fades: by 1/lagMemory of
	// the time since it was last measured, so that a stall of 100 ms counts
	// for 1.6 s. A starved process stalls again and again, at moments no
	// one can foresee (its collector, the machine's other processes): a
	// lag that faded between two stalls would have the next one find its
	// locks renewed late.
	lagMemory = 16
)

// A lane renews the locks that live on one Redis endpoint: a watched
// client, one master node of a cluster client, or one shard of a Ring.
// Everything that can wait for Redis waits in the lane of the endpoint it
// waits for, so that a stalled, dead or slow endpoint delays no renewal on
// another one.
//
// A lane has one scheduler: every renew call to its endpoint, the sweep's
// and those of the locks due between ticks, leaves through it, at most
// pacedCalls in flight, the most urgent first (see pass.go). Its
// goroutines are the scheduler loop, the sweeper, which walks the table
// when a tick asks and offers its calls to the scheduler, and one per call
// in flight.
type lane struct {
	w     *Watchdog
	c     *client
	name  string // the endpoint, for logs and stats
	shard string // a Ring's shard: the address of the client renewals go to

	quit      chan struct{} // closed when the lane is no longer needed
	sweepKick chan struct{} // buffered 1
	dueKick   chan struct{} // buffered 1: wakes the scheduler; send with kickDue
	kickedNs  atomic.Int64  // UnixNano of the first kick the scheduler has not taken; 0: none
	taken     chan bool     // buffered 1: the scheduler's answer to an offered sweep call
	pool      chan *pipe    // idle pipelines; capacity maxPipes
	pipes     atomic.Int32  // pipelines made

	// The schedule, guarded by the lock of the client's table (the
	// registry's hook holds it when it schedules a lock, and needs no
	// other lock to do so). See queue.go.
	wait    timeq          // Queued entries, by when they must be looked at again (one valid slot each: table.Entry.Gen)
	ready   timeq          // Ready entries, by their tell time (the earliest expiry first)
	overdue []*table.Entry // Ready entries past their tell time, in tell order
	urgent  []*table.Entry // Ready entries of hedged calls, and those renewed at once
	urgentN int            // keys a call of urgent entries carries
	// sweepN is how many calls' worth a sweep that must hurry has in
	// flight (sweepCallsFor).
	sweepN int
	listed int            // entries in the schedule (Queued or Ready), for Stats
	dueAt  time.Time      // when the scheduler wakes next; zero when idle
	inPass bool           // a pass runs (it finds by itself when to run next)
	yield  bool           // the last pass ran out of budget: the scheduler yields before the next (its goroutine only)
	calls  []*pipe        // the buffer of a pass's calls, reused (its goroutine only)
	tells  []*table.Entry // the buffer of a pass's tells, reused (its goroutine only)
	// tellSlots: some slots in wait are retries' tell times, computed for
	// a lag of tellSlotLag at the least (see passRun.retell).
	tellSlots   bool
	tellSlotLag int64
	// fresh counts the entries in the Fresh state (on a client with one
	// endpoint), and freshAt is the earliest time one of them may be
	// renewed, in ns since the set's epoch (0: no look due).
	fresh   int
	freshAt int64
	bigWarm bool // the schedule has held a call's worth of locks: the pool was warmed (grew)

	// A client of the lane's own for calls when the pool they would take
	// a connection from has none free (spare.go); spareMu guards it.
	spareMu    sync.Mutex
	spare      *redis.Client
	spareShut  bool         // closed: none is made again
	spareCalls atomic.Int64 // calls sent on it
	spareUntil atomic.Int64 // UnixNano until which every call goes on it while the pool is full

	mu        sync.Mutex // guards the fields below; taken after the table's
	retired   bool       // the client gave its lanes back (client.retire)
	sweptLast bool       // the sweeper has ended: a sweep asked now is finished at once
	idleSince int64      // when the lane last found itself idle (ns since the set's epoch); 0: not idle
	wantSweep bool
	requests  []*request
	flight    []*pipe   // calls in flight, waited for (not hedged)
	paced     int       // keys in flight counted against the limit (weigh): a full call counts the chunk size
	offered   *pipe     // a sweep call waiting for the scheduler to send it
	hedging   bool      // a call was hedged and none has answered in time since
	down      bool      // the last renewal on the endpoint failed for want of an answer
	retryAt   time.Time // when failed renewals are tried again
	lastErr   error     // the last renewal error
	cause     error     // the last error that tells why (not a mere timeout) since a success
	lastOK    time.Time
	sweepTook time.Duration
	probing   bool          // a dial looks for the cause of a failure
	rtt       time.Duration // the recent round trip: the largest, decaying
	rttAt     time.Time
	// answered is rtt of the calls that were answered only: a hedge
	// raises rtt to its whole wait, answered or not (noteRTTLocked).
	answered   time.Duration
	answeredAt time.Time

	// The sweep running, for its pace (passRun.sweepLate; guarded by mu): when it began
	// and when it should end (ns since the set's epoch; sweepBy 0: as soon
	// as it may, a Sweep call's), how many locks it has sent, and how many
	// it is expected to send (the last sweep's count, or the table's size).
	sweepFrom, sweepBy int64
	sweepSent          int
	sweepWant          int
	sweepLastN         int // locks the last sweep sent

	// dial opens a connection to the endpoint the way its client does,
	// to learn why it does not answer (nil when it cannot be told).
	dial func(context.Context) (net.Conn, error)

	renewed, failed, lost, sweeps atomic.Int64
	missed, hedges, unconfirmed   atomic.Int64
	warming                       atomic.Bool  // startWarm's goroutine runs
	passes                        atomic.Int64 // scheduler passes, for tests
	lagNs                         atomic.Int64 // the scheduler's recent lag, for settle
	tellLagNs                     atomic.Int64 // the lateness tell times allow for (passRun.tellLag), for a group's tells
	// stale counts the entries of the schedule the holder has ended since
	// the scheduler last cleaned it: the lane forgets ended locks lazily,
	// and the holder asks the scheduler to drop them early when they are
	// half the schedule (see lane.ended).
	stale   atomic.Int64
	size    atomic.Int64 // the schedule's slots, as the last pass left them
	compact atomic.Bool  // ended asks the scheduler to drop ended entries
	// rehome: the router found slots moved to other nodes (a failover, a
	// migration); the next pass hands the scheduled locks that moved to
	// their new lanes at once (passRun.rehome).
	rehome  atomic.Bool
	segment []*table.Entry // the sweeper's, on a cluster

	// The scheduler goroutine's own (see passRun.logLateTells): how late
	// its current pass began (after its timer's time, or after the kick
	// that woke it), and when the pass before began.
	wokeLate time.Duration
	lastPass time.Time
}

// newLane makes and starts the lane of the endpoint name; shard is a
// Ring's shard address, "" otherwise.
func newLane(c *client, name, shard string) *lane {
	l := &lane{
		w:         c.w,
		c:         c,
		name:      name,
		shard:     shard,
		quit:      make(chan struct{}),
		sweepKick: make(chan struct{}, 1),
		dueKick:   make(chan struct{}, 1),
		taken:     make(chan bool, 1),
		pool:      make(chan *pipe, maxPipes),
		urgentN:   c.chunk,
	}
	l.dial = dialerFor(c, name)
	l.sweepN = sweepCallsFor(c.t.Client)
	if l.w.addLoops(2) {
		go l.sweeper()
		go l.scheduler()
		l.startWarm()
	} else {
		l.sweptLast = true // Stop has begun and the lane never runs: a sweep asked of it ends at once
	}
	return l
}

// sweepCallsFor is how many calls' worth a sweep that must hurry has in
// flight on an endpoint of cl: sweepCalls when its pool (a cluster's or a
// Ring's per node or shard) holds sweepPool connections or more,
// pacedCalls otherwise.
func sweepCallsFor(cl redis.UniversalClient) int {
	size := 0
	switch c := cl.(type) {
	case *redis.Client:
		o := c.Options()
		size = o.PoolSize
		if o.MaxActiveConns > 0 {
			size = min(size, o.MaxActiveConns)
		}
	case *redis.ClusterClient:
		size = c.Options().PoolSize
	case *redis.Ring:
		if size = c.Options().PoolSize; size == 0 {
			size = 10 * runtime.GOMAXPROCS(0) // go-redis's default for each shard
		}
	}
	if size >= sweepPool {
		return sweepCalls
	}
	return pacedCalls
}

// warmConns is how many connections a lane of a call's worth of locks or
// more has its endpoint's pool hold before its calls need them: pacedCalls
// and a hedge's calls.
const warmConns = pacedCalls + 4

// startWarm has the pool of the lane's endpoint hold warmConns
// connections (at most half its PoolSize; idle, they serve the
// application too), dialled ahead of need, once its
// client tracks a call's worth of locks (a chunk): when the lane begins,
// when its schedule first holds that many (grew) and, should the pool have
// closed idle ones since, before each sweep, rather than when a second
// call or a hedge first needs one. A client with fewer locks, one call's
// worth, costs no connection more than it uses (issue 21's budget: a
// watched client costs at most one). A process starved of CPU
// takes several of its turns to dial and greet a server (at GOMAXPROCS=1
// beside spinning goroutines, 80 ms a turn): a call that waits for that
// answers after its short locks have expired (issue 26 item 4). A
// cluster's node pools are go-redis's own: not warmed.
func (l *lane) startWarm() {
	if !l.warming.CompareAndSwap(false, true) {
		return
	}
	if !l.w.addLoops(1) {
		return
	}
	go func() {
		defer l.w.loops.Done()
		defer l.warming.Store(false)
		l.warm()
	}()
}

// warm dials what startWarm asks for: PINGs as many at once as the pool
// should hold connections, so that each idle connection is taken for a
// round trip and the others are dialled. No connection the pool had is
// held longer than a PING: the lane's calls and the application's need
// them. A PING may find a connection another has just put back (an
// in-memory server answers at once): rounds follow while the pool holds
// fewer, up to twice warmConns.
func (l *lane) warm() {
	var rc *redis.Client
	switch {
	case l.shard != "":
		rc = l.c.shardClient(l.shard)
	case !l.c.cluster:
		rc, _ = l.c.t.Client.(*redis.Client)
	}
	if rc == nil || l.c.t.Len() < l.c.chunk {
		return
	}
	want := min(warmConns, rc.Options().PoolSize/2)
	for range 2 * warmConns {
		if int(rc.PoolStats().TotalConns) >= want || l.w.ctx.Err() != nil {
			return
		}
		var wg sync.WaitGroup
		for range want {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(table.WithoutTracking(l.w.ctx), dialProbeTimeout)
				defer cancel()
				_ = rc.Ping(ctx).Err()
			}()
		}
		wg.Wait()
	}
}

// kickDue wakes the scheduler, noting when: how long it then takes to run
// is how late the process runs (see scheduler).
func (l *lane) kickDue() {
	l.kickedNs.CompareAndSwap(0, time.Now().UnixNano())
	kick(l.dueKick)
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// ask asks the sweeper for a sweep; r, when not nil, learns when it is done.
func (l *lane) ask(r *request) {
	l.mu.Lock()
	if l.retired || l.sweptLast { // nothing to renew, or nobody left to renew it
		l.mu.Unlock()
		if r != nil {
			r.wg.Add(1)
			r.finish(l.endErr())
		}
		return
	}
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
	defer func() { l.finishRequests(l.endErr()) }()
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
		if l.c.t.Len() >= l.c.chunk { // else warm would return at once: no goroutine for it
			l.startWarm()
		}
		err := l.sweep(len(reqs) > 0) // Sweep renews every lock; a tick leaves the fast lane's to the schedule
		for _, r := range reqs {
			r.finish(err)
		}
		// A pass that ran while the sweep was asked for or ran found the
		// lane busy: the next looks whether it is idle now (else a lane
		// with nothing to renew would never give itself back).
		l.kickDue()
	}
}

// scheduler runs the lane's passes (pass.go): when a call ends, when the
// holder schedules a lock, when a sweep offers a call, and when the
// earliest time the last pass asked for comes. It measures its own lag:
// how late its timer wakes it. Apart, it measures how long it takes to run
// once kicked (from the kick, or from when it began to wait if it was
// busy then), its starvation: in a process starved of CPU answers kick
// the scheduler so often that its timer seldom fires (CI run 5 of issue
// 27: at GOMAXPROCS=1 beside four spinning goroutines the lag read 0
// while answers waited 75 ms to be read, and 100 locks Redis had renewed
// were given up as unreachable, against I12). The starvation decides
// whether a call that did not answer may have been applied (unreadSent),
// and counts with the lag for renewals settled and hedge waits (lagNs);
// give-ups count the timer's lag alone.
func (l *lane) scheduler() {
	defer l.w.loops.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var next, armed time.Time
	var lag, starve lagGauge
	for {
		if d := passDelay.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		lg := max(lag.value, time.Duration(lagFloor.Load()))
		next = l.pass(time.Now(), lg, max(lg, starve.value))
		// The lag counts from when the timer was armed at the earliest:
		// a pass that took long (it waited for the sweeper, say) is not
		// the process running late.
		armed = time.Now()
		if !next.IsZero() {
			timer.Reset(next.Sub(armed))
		}
		select {
		case <-l.w.ctx.Done():
			timer.Stop()
			return
		case <-l.quit:
			timer.Stop()
			return
		case <-l.dueKick:
			timer.Stop()
			now := time.Now()
			due := now
			if k := l.kickedNs.Swap(0); k != 0 {
				starve.note(now, time.Unix(0, k), armed)
				due = time.Unix(0, k)
			}
			if !next.IsZero() && next.Before(due) {
				due = next // its timer was due first
			}
			l.wokeLate = wokeLate(now, due, armed)
			// Let the application's goroutines run between passes when
			// the last one ran out of budget and kicked itself. Only
			// then: a yield puts the scheduler at the back of the run
			// queue, and in a process starved of CPU (goroutines that
			// spin, a busy machine) that costs it a turn of every other
			// goroutine before the answer that kicked it is acted on.
			if l.yield {
				runtime.Gosched()
			}
		case <-timer.C:
			now := time.Now()
			lag.note(now, next, armed)
			l.wokeLate = wokeLate(now, next, armed)
		}
	}
}

// wokeLate is how late a wake at now was, for a pass due at due by a
// scheduler that began to wait at armed (a long pass is not lateness).
func wokeLate(now, due, armed time.Time) time.Duration {
	if due.Before(armed) {
		due = armed
	}
	return max(now.Sub(due), 0)
}

// lagFloor is a floor under every scheduler's lag, for tests only
// (export_test.go): a test in virtual time has no lag of its own.
var lagFloor atomic.Int64

// passDelay is how long every scheduler waits after it wakes before its
// pass, for tests only (export_test.go): a host that does not run the
// scheduler's thread, which its lag does not see.
var passDelay atomic.Int64

// tellPause, when set, runs in every tell between marking its locks told
// and cancelling their contexts, for tests only (export_test.go): a
// teller whose thread the host does not run just then.
var tellPause atomic.Pointer[func()]

// noRunWait, when set, has runWait read nothing, for tests only
// (export_test.go, Bubble): in a synctest bubble time is virtual and does
// not pass while goroutines wait for a CPU, and the runtime's real waits
// would delay a give-up by virtual time (TestGivenUpOnTimeWhenSilent beside
// spinning goroutines: given up 578 ms after the cut of a 300 ms lock).
var noRunWait atomic.Bool

// lookPause, when set, runs in a look that found a lock over several
// servers due and not told, before it tells it, for tests only: another
// teller may mark it in between.
var lookPause atomic.Pointer[func()]

// startDelay is how long every call's goroutine waits before it sends,
// for tests only (export_test.go): in virtual time a goroutine starts at
// once, in a process starved of CPU tens of milliseconds late.
var startDelay atomic.Int64

// lagGauge is how late the scheduler recently ran: the largest lateness
// seen, fading by 1/lagMemory of the time since it was measured.
type lagGauge struct {
	value    time.Duration
	measured time.Time
}

// note counts a wake at now that was due at from, or at armed (when the
// scheduler began to wait) if that is later: a long pass is not lateness.
func (g *lagGauge) note(now, from, armed time.Time) {
	if from.Before(armed) {
		from = armed
	}
	late := max(now.Sub(from), 0)
	if !g.measured.IsZero() {
		g.value = max(g.value-now.Sub(g.measured)/lagMemory, 0)
	}
	g.value, g.measured = max(g.value, late), now
}

// endErr is what a sweep asked of the lane gets when the lane ends:
// ErrStopped when the watchdog stops, nothing when the client retired
// (nothing to renew).
func (l *lane) endErr() error {
	if l.w.ctx.Err() != nil {
		return ErrStopped
	}
	return nil
}

// idleLocked reports whether the lane has nothing to do: nothing
// scheduled, in flight, hedged and still on its way, offered or asked for.
// The table and l.mu must be held.
func (l *lane) idleLocked() bool {
	return l.listed == 0 && l.fresh == 0 && len(l.flight) == 0 && l.offered == nil &&
		!l.wantSweep && len(l.requests) == 0 && int(l.pipes.Load()) == len(l.pool)
}

// finishRequests ends the sweeps still asked for when the lane ends, and
// those asked later (ask): Sweep looks whether Stop has begun before it
// asks, and Stop may begin in between.
func (l *lane) finishRequests(err error) {
	l.mu.Lock()
	reqs := l.requests
	l.requests = nil
	l.sweptLast = true
	l.mu.Unlock()
	for _, r := range reqs {
		r.finish(err)
	}
}

// loss builds the report of e, a lock this lane gave up.
func (l *lane) loss(e *table.Entry, info table.Info, reason error) loss {
	return loss{e: e, t: l.c.t, info: info, reason: reason, endpoint: l.name}
}

// adopt takes entries scheduled in another lane that now belong to this
// one (a cluster's slots moved, or a lock that had no route found one):
// they are looked at now, and renewed at once, due or not, when now is
// true (passRun.rehome: their slot moved from one node to another). Such
// keys live on a node that has not confirmed them: a promoted replica may
// lack the last renewals its master applied (replication is
// asynchronous), and a lock renewed there only when due kept its
// holder's deadline on a node that no longer serves it (I9: "renewed
// again as soon as its new owner node answers").
func (l *lane) adopt(es []*table.Entry, now bool) {
	if len(es) == 0 {
		return
	}
	t := l.c.t
	t.Lock()
	at := l.w.set.Now()
	for _, e := range es {
		if e.Detached() {
			continue
		}
		e.Unqueue()
		if now {
			l.makeUrgent(e, l.c.chunk)
		} else {
			l.schedule(e, at)
		}
	}
	t.Unlock()
	l.kickDue()
}
