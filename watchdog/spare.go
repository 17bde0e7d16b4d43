package watchdog

import (
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A renew call takes a connection of the client's pool, as the
// application's commands do. When the application holds every connection
// (blocking commands such as BLPOP, slow commands, a pool sized to its
// workers), the call waits in the pool's queue behind them, up to
// PoolTimeout: long enough for a short lock to expire while Redis would
// answer at once. Its deadline would then depend on the application's use
// of its own pool.
//
// So a lane has a small client of its own, made from the watched client's
// options, for when the pool it would take a connection from has none
// free and a deadline is at stake: a hedge (a call that did not answer by
// its most urgent lock's hedge time is sent again) goes on it, and so does
// every call for spareHold after such a hedge or after a call that waited
// past PoolTimeout, while the pool stays full.
// A pool that is merely busy (the application's commands queue for a few
// milliseconds) is shared as before: renew calls wait their turn, and the
// application keeps its share of the server. A lane that never needed the
// spare costs no connection; one that did keeps it (at most spareConns
// server connections) until the lane ends.
//
// Not for a cluster client (its node pools are go-redis's, found by slot)
// nor for a Sentinel failover client: go-redis closes its pool's
// connections to the old master when the master changes, and a copy's
// would not be.

// spareHold is how long after a hedge on the spare client the lane sends
// every call on it while the pool has no connection free.
const spareHold = 10 * time.Second

// spareConns is the pool size of a lane's spare client: one call, and its
// hedge or a second call beside it.
const spareConns = 2

// failoverAddr is the Addr go-redis gives the options of a Sentinel
// failover client (NewFailoverClient).
const failoverAddr = "FailoverClient"

// noSpare, set by tests, makes no lane use a spare client.
var noSpare atomic.Bool

// optioned is a client whose options can be copied: *redis.Client, or a
// type that embeds one.
type optioned interface {
	Options() *redis.Options
}

// poolFull reports whether target has no connection free: as many in use
// as its pool allows, so that a command would wait for one.
func poolFull(target redis.UniversalClient) (*redis.Options, bool) {
	oc, ok := target.(optioned)
	if !ok {
		return nil, false
	}
	o := oc.Options()
	if o == nil || o.Addr == failoverAddr {
		return nil, false
	}
	limit := o.PoolSize
	if o.MaxActiveConns > 0 {
		limit = min(limit, o.MaxActiveConns)
	}
	st := target.PoolStats()
	if st == nil || limit <= 0 {
		return nil, false
	}
	return o, int(st.TotalConns)-int(st.IdleConns) >= limit
}

// spareFor returns the lane's spare client for a call when target, the
// client the call would go through, has no connection free, and the call
// is a hedge or one came lately; nil when the call should take one of
// target's.
func (l *lane) spareFor(target redis.UniversalClient, hedge bool) redis.UniversalClient {
	now := time.Now().UnixNano()
	if !hedge && now >= l.spareUntil.Load() {
		return nil
	}
	o, full := poolFull(target)
	if !full || noSpare.Load() {
		return nil
	}
	l.spareMu.Lock()
	defer l.spareMu.Unlock()
	if l.spareShut {
		return nil
	}
	if l.spare == nil {
		so := *o
		so.PoolSize, so.MinIdleConns, so.MaxIdleConns, so.MaxActiveConns = spareConns, 0, spareConns, 0
		l.spare = redis.NewClient(&so)
		l.w.o.logger.Info("watchdog: a renewal waited for the client's pool, which had no connection free; calls go on connections of the watchdog's own while it has none", "endpoint", l.name, "pool_size", o.PoolSize, "spare_conns", spareConns)
	}
	if hedge {
		l.spareUntil.Store(now + int64(spareHold))
	}
	l.spareCalls.Add(1)
	l.w.spareCalls.Add(1)
	return l.spare
}

// closeSpare closes the lane's spare client, if it made one, once no call
// can be using it; none is made after.
func (l *lane) closeSpare() {
	l.spareMu.Lock()
	s := l.spare
	l.spare, l.spareShut = nil, true
	l.spareMu.Unlock()
	if s != nil {
		_ = s.Close()
	}
}

// closeSpares closes the spare clients of every lane, once Stop has seen
// the calls end.
func (w *Watchdog) closeSpares() {
	w.mu.Lock()
	cs := make([]*client, 0, len(w.clients))
	for _, c := range w.clients {
		cs = append(cs, c)
	}
	w.mu.Unlock()
	for _, c := range cs {
		for _, l := range c.allLanes() {
			l.closeSpare()
		}
	}
}
