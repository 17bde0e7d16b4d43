package watchdog

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// router keeps a cluster client's routes current and hands ticks to its
// lanes.
func (c *client) router() {
	w := c.w
	defer w.loops.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-w.ctx.Done():
			c.finishRequests()
			c.stopOrphanTell()
			return
		case <-c.quit:
			c.finishRequests()
			c.stopOrphanTell()
			return
		case <-c.kick:
		case <-timer.C:
		}
		if d := routeDelay.Load(); d > 0 { // tests only: a router that runs late
			select {
			case <-w.ctx.Done():
			case <-c.quit:
			case <-time.After(time.Duration(d)):
			}
		}
		c.mu.Lock()
		want, reqs, reload := c.wantSweep, c.requests, c.wantReload
		c.wantSweep, c.requests, c.wantReload = false, nil, false
		c.mu.Unlock()
		if reload || c.downRouted() {
			// A lane that serves slots failed: ask go-redis for the slot
			// map again, and keep asking (the timer brings the router
			// back) until the slots route to a node that answers. One
			// reload may not be enough: it may read the map before the
			// cluster promoted a replica, or go-redis may spend seconds
			// on the dead node first (v9.23 retries a refused dial).
			if time.Since(c.reloadedAt) >= reloadEvery {
				c.cc.ReloadState(w.ctx)
				c.reloadedAt = time.Now()
			}
			timer.Reset(reloadSettle) // route again once go-redis has reloaded
		}
		changed, moved := c.route()
		if changed {
			for _, l := range c.allLanes() {
				if moved {
					l.rehome.Store(true)
				}
				l.kickDue() // they hand locks that moved to their new lane
			}
		}
		// The locks waiting for a route stay in c.orphans while the
		// router routes (tellOrphans sees them there), and are taken
		// once routed.
		c.mu.Lock()
		orphans := c.orphans
		c.orphans = nil
		c.mu.Unlock()
		left := 0
		for _, e := range orphans {
			if l := c.owner(e); l != nil {
				l.adopt([]*table.Entry{e}, false)
			} else {
				left++
				c.mu.Lock()
				c.orphans = append(c.orphans, e)
				c.mu.Unlock()
			}
		}
		if left > 0 {
			// go-redis's slot map names no node for their slots yet: ask
			// it again, and route again once it has reloaded.
			c.mu.Lock()
			c.wantReload = true
			c.mu.Unlock()
			timer.Reset(reloadSettle)
		}
		if want {
			for _, l := range c.routedLanes() {
				if len(reqs) == 0 {
					l.ask(nil)
				}
				for _, r := range reqs {
					l.ask(r)
				}
			}
		}
		for _, r := range reqs {
			r.finish(nil)
		}
	}
}

// routeDelay is how long a router waits before each routing, for tests
// only (export_test.go): a router late to run, as in a process starved of
// CPU.
var routeDelay atomic.Int64

// finishRequests ends the sweeps still asked for when the router ends:
// with ErrStopped when the watchdog stops, with nothing when the client
// retired (nothing to renew).
func (c *client) finishRequests() {
	c.mu.Lock()
	reqs := c.requests
	c.requests = nil
	c.routerDone = true // and those asked later (see lane.finishRequests)
	c.mu.Unlock()
	err := c.endErr()
	for _, r := range reqs {
		r.finish(err)
	}
}

// endErr is what a sweep asked of the client gets once its router has
// ended (see lane.endErr).
func (c *client) endErr() error {
	if c.w.ctx.Err() != nil {
		return ErrStopped
	}
	return nil
}

// routedLanes returns the lanes the current routes name.
func (c *client) routedLanes() []*lane {
	r := c.routes.Load()
	if r == nil {
		return nil
	}
	seen := make(map[*lane]bool)
	var out []*lane
	for _, l := range r {
		if l != nil && !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

// route maps every slot that has tracked locks to the lane of its master
// node, as go-redis's slot map has it, and reports whether a route
// changed, and whether a slot moved from one node to another (a failover,
// a migration; not a slot routed for the first time). A slot whose node
// cannot be found keeps its old route.
func (c *client) route() (changed, moved bool) {
	var slots []uint16
	c.t.SlotCounts(func(counts []int32) {
		for s, n := range counts {
			if n > 0 {
				slots = append(slots, uint16(s))
			}
		}
	})
	old := c.routes.Load()
	next := new(routeTable)
	ctx, cancel := context.WithTimeout(c.w.ctx, routeTimeout)
	defer cancel()
	changed = old == nil
	for _, s := range slots {
		var l *lane
		if node, err := c.cc.MasterForKey(ctx, slotKey(s)); err == nil {
			l = c.laneFor(node.Options().Addr)
		} else if old != nil {
			l = old[s]
		}
		next[s] = l
		if old != nil && old[s] != l && l != nil {
			changed = true
			moved = moved || old[s] != nil
		}
	}
	if old != nil {
		// Slots whose locks are gone keep their route: a lock may come back.
		for s, l := range old {
			if next[s] == nil {
				next[s] = l
			}
		}
	}
	c.routes.Store(next)
	return changed, moved
}

// downRouted reports whether a lane that slots with tracked locks route
// to is down.
func (c *client) downRouted() bool {
	r := c.routes.Load()
	if r == nil {
		return false
	}
	anyDown := false
	for _, l := range c.allLanes() {
		anyDown = anyDown || l.isDown()
	}
	if !anyDown {
		return false // the common case: no slot needs looking at
	}
	seen := make(map[*lane]bool)
	down := false
	c.t.SlotCounts(func(counts []int32) {
		for s, n := range counts {
			if l := r[s]; n > 0 && l != nil && !seen[l] {
				seen[l] = true
				if l.isDown() {
					down = true
					return
				}
			}
		}
	})
	return down
}

// laneFor returns the lane of the node at addr, making it when needed.
func (c *client) laneFor(addr string) *lane {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.lanes[addr]; l != nil {
		return l
	}
	l := newLane(c, addr, "")
	c.lanes[addr] = l
	return l
}

// slotKeys holds, for each hash slot, a short key that hashes to it, so
// that go-redis's MasterForKey can tell a slot's node. The keys are two
// bytes: CRC16 maps the 65,536 two-byte strings one to one onto its
// values, so they cover every slot four times over, in a millisecond (a
// search over decimal strings took 65 ms under the race detector, on the
// router's first run, while the first locks of a cluster waited for it).
// Braces are left out (a hash tag); the keys never leave the process.
var slotKeys = sync.OnceValue(func() []string {
	keys := make([]string, table.SlotCount)
	left := table.SlotCount
	var b [2]byte
	for i := 0; i < 1<<16 && left > 0; i++ {
		b[0], b[1] = byte(i>>8), byte(i)
		if b[0] == '{' || b[0] == '}' || b[1] == '{' || b[1] == '}' {
			continue
		}
		k := string(b[:])
		if s := table.SlotOf(k); keys[s] == "" {
			keys[s] = k
			left--
		}
	}
	for i := 0; left > 0; i++ { // not reached: every slot has two-byte keys without braces
		k := strconv.Itoa(i)
		if s := table.SlotOf(k); keys[s] == "" {
			keys[s] = k
			left--
		}
	}
	return keys
})

func slotKey(s uint16) string { return slotKeys()[s] }
