package watchdog

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

const (
	// pipelineCalls is how many full renew calls one pipeline carries:
	// one, so that a renewal holds Redis for no longer than one call of
	// DefaultChunkSize keys (about 0.4 ms), and is sent from the client's
	// own pool (no pipeline pool of its own).
	pipelineCalls = 1
	// sweepPipes is how many pipelines of one sweep are in flight at once
	// on one endpoint: two, so that Redis has the sweep's next call as
	// soon as it is done with one (a call of 100 keys holds it for about
	// 0.4 ms), serves the application's commands between the two, and a
	// stalled call (a dead connection) does not hold the sweep up.
	sweepPipes = 2
	// maxPipes bounds the pipelines an endpoint has at all, those in
	// flight, those given up but not yet answered (a stalled server) and
	// idle ones. When none is free the due list waits for its next round.
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

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
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

// loss builds the report of e, a lock this lane gave up.
func (l *lane) loss(e *table.Entry, info table.Info, reason error) loss {
	return loss{e: e, t: l.c.t, info: info, reason: reason, endpoint: l.name}
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
