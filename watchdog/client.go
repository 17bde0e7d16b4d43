package watchdog

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/table"
)

const (
	// reloadEvery is the shortest time between two cluster slot map
	// reloads the watchdog asks for.
	reloadEvery = 250 * time.Millisecond
	// reloadSettle is how long after asking for a reload (go-redis reloads
	// in the background) the watchdog routes its locks again.
	reloadSettle = 300 * time.Millisecond
	// routeTimeout bounds one routing of a cluster client's slots (it may
	// have to load the slot map first).
	routeTimeout = 5 * time.Second
)

// client is the watchdog's side of one watched client: its endpoints'
// lanes and, on a cluster client, the routing of hash slots to them.
type client struct {
	w       *Watchdog
	t       *table.Table
	name    string
	chunk   int // keys per renew call (a Ring lane sends to its shard: all keys of a lock live there)
	cluster bool
	cc      *redis.ClusterClient
	closed  atomic.Bool

	single *lane // the one lane of a client with one endpoint

	// A Ring has one lane per shard, each sending to the shard's own
	// client, so that a stalled shard delays no renewal on another (the
	// Ring's own pipeline waits for every shard). A lock lives on the
	// shard of its first key, as the Ring's consistent hash over its
	// shards puts it.
	ring      *redis.Ring
	ringHash  redis.ConsistentHash
	ringLanes map[string]*lane // by shard name
	shardMu   sync.Mutex       // guards shards
	shards    map[string]*redis.Client

	// A cluster client has one lane per master node, found through
	// go-redis's slot map (MasterForKey), and a router goroutine that
	// keeps routes current: on every tick, and after asking go-redis to
	// reload the slot map when a lane failed (a failover, a migration).
	routes atomic.Pointer[routeTable]
	kick   chan struct{} // wakes the router; buffered 1
	quit   chan struct{} // closed when the client is no longer swept

	mu         sync.Mutex // guards the fields below
	lanes      map[string]*lane
	wantSweep  bool
	routerDone bool // the router has ended: a sweep asked now is finished at once
	requests   []*request
	wantReload bool
	reloadedAt time.Time
	orphans    []*table.Entry // queued locks of slots without a route yet
	// orphanTell tells the holders of orphans whose tell time has come
	// (tellOrphans), armed for orphanAt (ns since the set's epoch; 0: not
	// armed; -1: stopped with the router). It runs on a goroutine of its
	// own: a router slow to route (a process starved of CPU) does not
	// hold it up.
	orphanTell *time.Timer
	orphanAt   int64
}

// routeTable maps each hash slot to the lane of the node that serves it;
// nil for slots without tracked locks when it was made.
type routeTable [table.SlotCount]*lane

func newClient(w *Watchdog, t *table.Table) *client {
	c := &client{w: w, t: t, name: endpointName(t.Client), chunk: w.o.chunkSize, quit: make(chan struct{})}
	switch cl := t.Client.(type) {
	case *redis.ClusterClient:
		c.cluster, c.cc = true, cl
		c.lanes = make(map[string]*lane)
		c.kick = make(chan struct{}, 1)
		if w.addLoops(1) {
			go c.router()
		} else {
			c.routerDone = true // Stop has begun: no router runs
		}
	case *redis.Ring:
		c.ring = cl
		opt := cl.Options()
		names := make([]string, 0, len(opt.Addrs))
		for name := range opt.Addrs {
			names = append(names, name)
		}
		c.ringHash = opt.NewConsistentHash(names)
		c.ringLanes = make(map[string]*lane, len(names))
		for name, addr := range opt.Addrs {
			l := newLane(c, addr, addr)
			c.ringLanes[name] = l
		}
	default:
		c.single = newLane(c, c.name, "")
	}
	return c
}

// endpointName names a client for logs and stats.
func endpointName(c redis.UniversalClient) string {
	switch cl := c.(type) {
	case *redis.Client:
		return cl.Options().Addr
	case *redis.ClusterClient:
		return "cluster"
	case *redis.Ring:
		return "ring"
	}
	return "client"
}

// owner returns the lane of the endpoint e lives on; nil on a cluster
// client while e's slot has no route.
func (c *client) owner(e *table.Entry) *lane {
	if c.ring != nil {
		return c.ringLanes[c.ringHash.Get(hashTag(e.Key))]
	}
	if !c.cluster {
		return c.single
	}
	if r := c.routes.Load(); r != nil {
		return r[e.Slot()]
	}
	return nil
}

// allLanes returns the client's lanes.
func (c *client) allLanes() []*lane {
	if c.ring != nil {
		out := make([]*lane, 0, len(c.ringLanes))
		for _, l := range c.ringLanes {
			out = append(out, l)
		}
		return out
	}
	if !c.cluster {
		return []*lane{c.single}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*lane, 0, len(c.lanes))
	for _, l := range c.lanes {
		out = append(out, l)
	}
	return out
}

// kickAll wakes the schedulers of every lane of the client, without
// allocating (it runs on the application's goroutine, in the hook).
func (c *client) kickAll() {
	switch {
	case c.ring != nil:
		for _, l := range c.ringLanes {
			l.kickDue()
		}
	case !c.cluster:
		c.single.kickDue()
	default:
		c.mu.Lock()
		for _, l := range c.lanes {
			l.kickDue()
		}
		c.mu.Unlock()
	}
}

// ask asks every endpoint of the client for a sweep; r, when not nil,
// learns when they are done.
func (c *client) ask(r *request) {
	if c.closed.Load() {
		return
	}
	if c.ring != nil {
		for _, l := range c.ringLanes {
			l.ask(r)
		}
		return
	}
	if !c.cluster {
		c.single.ask(r)
		return
	}
	c.mu.Lock()
	if c.routerDone {
		c.mu.Unlock()
		if r != nil {
			r.wg.Add(1)
			r.finish(c.endErr())
		}
		return
	}
	c.wantSweep = true
	if r != nil {
		r.wg.Add(1)
		c.requests = append(c.requests, r)
	}
	c.mu.Unlock()
	kick(c.kick)
}

// queue schedules e on its endpoint's lane, to be looked at at (ns since
// the set's epoch); the table must be locked. On a cluster, a lock whose
// slot has no route yet waits for the router.
func (c *client) queue(e *table.Entry, at int64) {
	l := c.owner(e)
	if l == nil {
		if e.Enqueue() {
			tell := tellAt(e, int64(c.w.lateness(time.Now())))
			c.mu.Lock()
			c.orphans = append(c.orphans, e)
			c.armOrphansLocked(tell)
			c.mu.Unlock()
			kick(c.kick)
		}
		return
	}
	l.schedule(e, at)
}

// noRoute follows a cluster client's name where a lock waiting for a
// route is named: no lane renews it yet.
const noRoute = " (no route to its slot yet)"

// armOrphansLocked makes sure tellOrphans runs by at (ns since the set's
// epoch); c.mu must be held.
func (c *client) armOrphansLocked(at int64) {
	if c.orphanAt != 0 && c.orphanAt <= at { // armed earlier, or stopped (-1)
		return
	}
	c.orphanAt = at
	d := time.Until(c.w.set.At(at))
	if c.orphanTell == nil {
		c.orphanTell = time.AfterFunc(d, c.tellOrphans)
		return
	}
	c.orphanTell.Reset(d)
}

// stopOrphanTell stops tellOrphans' timer when the router ends: the
// watchdog stopped (every context is ended), or the client retired (it
// tracks no lock).
func (c *client) stopOrphanTell() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.orphanTell != nil {
		c.orphanTell.Stop()
	}
	c.orphanAt = -1 // never armed again
}

// tellOrphans tells the holders of the locks waiting for a route (a
// cluster slot go-redis's map has no node for yet, or a router late to
// run) whose tell time has come that they may be lost, as a lane tells
// its own (I15: before anyone else can take the key): a lock nobody
// renews is told all the same. It arms itself again for the next.
func (c *client) tellOrphans() {
	w := c.w
	if w.ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	if c.orphanAt < 0 {
		c.mu.Unlock()
		return
	}
	orphans := slices.Clone(c.orphans)
	c.orphanAt = 0
	c.mu.Unlock()
	lag := int64(w.lateness(time.Now()))
	now := w.set.Since(time.Now())
	next := int64(math.MaxInt64)
	var due []*table.Entry
	c.t.Lock()
	for _, e := range orphans {
		if e.Detached() || c.t.ToldLocked(e) {
			continue
		}
		if at := tellAt(e, lag); at > now {
			next = min(next, at)
		} else if c.t.TellLocked(e) {
			due = append(due, e)
		}
	}
	c.t.Unlock()
	w.tellUnconfirmedOn(c.t, c.name+noRoute, lag, due, nil, nil)
	if next < math.MaxInt64 {
		c.mu.Lock()
		c.armOrphansLocked(next)
		c.mu.Unlock()
	}
}

// failed learns that a renewal on l failed with err: a cluster client
// reloads its slot map (the node may have failed over, or the slot moved);
// a closed client is given up.
func (c *client) failed(l *lane, err error) {
	if isClosed(err) {
		if c.w.addLoops(1) { // else Stop has begun: nothing left to give up
			go func() {
				defer c.w.loops.Done()
				c.checkClosed()
			}()
		}
		return
	}
	if c.cluster {
		c.mu.Lock()
		c.wantReload = true
		c.mu.Unlock()
		kick(c.kick)
	}
}

// checkClosed gives the client up when it is really closed: a renewal
// answered redis.ErrClosed, which a cluster client also answers for a node
// it dropped from its slot map while the renewal ran.
func (c *client) checkClosed() {
	ctx, cancel := context.WithTimeout(c.w.ctx, time.Second)
	defer cancel()
	if err := c.t.Client.Ping(ctx).Err(); !isClosed(err) {
		return
	}
	c.close(redis.ErrClosed)
}

// closedNow reports whether the application has closed the client,
// without a round trip: go-redis answers a command on a closed client
// redis.ErrClosed before it looks at the context, and one with a context
// already done without sending it.
func (c *client) closedNow() bool {
	ctx, cancel := context.WithCancel(table.WithoutTracking(context.Background()))
	cancel()
	return isClosed(c.t.Client.Ping(ctx).Err())
}

// idleRetire is how long a client's lanes wait with nothing to renew (no
// lock tracked on the client, nothing scheduled or in flight) before they
// give back their goroutines and their place in Stats: a client the
// application closed, or one of a tenant gone idle, then costs nothing. A
// client that locks again gets lanes anew.
const idleRetire = time.Second

// downRetire is idleRetire for a lane whose endpoint is down (its last
// renewal failed for want of an answer): it stays listed in Stats, and in
// the lockwatch_endpoint_down gauge its alert watches, for that long,
// unless the application closes its client (see passRun.checkIdle).
const downRetire = 5 * time.Minute

// retire gives up the client's lanes if it still tracks no lock and every
// lane is idle; a lock obtained meanwhile keeps them. The table is locked
// for the check and the unpublishing, so that the hook, which schedules a
// new lock with the table locked, finds either these lanes, live, or none
// (and makes new ones, clientOf).
func (c *client) retire() {
	w, t := c.w, c.t
	t.Lock()
	if t.LenLocked() != 0 {
		t.Unlock()
		return
	}
	lanes := c.allLanes()
	for _, l := range lanes {
		l.mu.Lock()
		idle := l.idleLocked()
		l.mu.Unlock()
		if !idle {
			t.Unlock()
			return
		}
	}
	w.mu.Lock()
	mine := w.clients[c.t] == c && !w.stopping
	if mine {
		delete(w.clients, c.t)
		w.publish()
	}
	w.mu.Unlock()
	if !mine || !c.closed.CompareAndSwap(false, true) {
		t.Unlock()
		return
	}
	for _, l := range lanes {
		l.mu.Lock()
		l.retired = true // a sweep asked of it from now on is done at once
		l.mu.Unlock()
	}
	t.Unlock()
	close(c.quit)
	for _, l := range lanes {
		close(l.quit)
		l.closeSpare() // idle: no call in flight
	}
	w.o.logger.Debug("watchdog: client idle; its lanes are given back", "endpoint", c.name)
}

// close stops sweeping the client, untracks its locks and reports them
// with reason wrapped in an *UnreachableError.
func (c *client) close(reason error) {
	if !c.closed.CompareAndSwap(false, true) {
		return
	}
	w := c.w
	close(c.quit)
	for _, l := range c.allLanes() {
		close(l.quit)
		l.closeSpare() // a call in flight on it fails: its locks are given up below
	}
	w.forget(c)
	es, infos := c.t.DropAll()
	w.set.Remove(c.t)
	lost := make([]loss, 0, len(infos))
	for i, info := range infos {
		lost = append(lost, loss{e: es[i], t: c.t, info: info, reason: &UnreachableError{Endpoint: c.name, Err: reason}, endpoint: c.name})
	}
	w.o.logger.Warn("watchdog: client closed; its locks are given up and it is no longer swept", "endpoint", c.name, "locks", len(infos))
	w.report(lost...)
}
