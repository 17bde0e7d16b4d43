package watchdog

import (
	"cmp"
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// noteFailureLocked records that a renewal on the endpoint failed; down
// says whether the endpoint itself failed (no answer at all).
func (l *lane) noteFailureLocked(err error, minTTL time.Duration, down bool) {
	if down {
		l.down = true
	}
	if poolWait(err) {
		// The pool kept the call past PoolTimeout: while it has no
		// connection free, calls go on the lane's own (spare.go).
		l.spareUntil.Store(time.Now().Add(spareHold).UnixNano())
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

// endpointDown reports whether err, the error of a renewal none of whose
// calls succeeded, says that the endpoint does not serve: no answer (a
// timeout, a dropped or refused connection, a closed client), or a reply
// that it cannot serve now (LOADING, BUSY, CLUSTERDOWN, MASTERDOWN,
// TRYAGAIN). An error reply about the call itself (a script error, say)
// does not: the endpoint answers, and its other calls go on.
func endpointDown(err error) bool {
	if err == nil || poolWait(err) {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	for _, p := range []string{"LOADING", "BUSY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// poolWait reports whether err says that the renew call never left the
// client: its connection pool had no connection for it within
// PoolTimeout (or none at all, MaxActiveConns). That is the application's
// own load on its pool, not the endpoint failing: its state is unknown
// and its other calls go on. Counted as the endpoint's failure, one such
// call ended a sweep and handed every lock it had not sent to the
// schedule as a retry: 100,000 locks of 30 s on "@every 2s" with
// PoolSize 4 and PoolTimeout 1s beside an open-loop application that
// kept the pool busy (go run ./cmd/lockwatch-bench -cases neighbour
// -neighbour-duration 60s) gave up 70,909 locks as unreachable while
// Redis answered every call that reached it. go-redis's pool errors are
// not exported before v9.19, and their texts have not changed since
// v9.0.
func poolWait(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		switch err.Error() {
		case "redis: connection pool timeout", "redis: connection pool exhausted":
			return true
		}
	}
	return false
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
// up reports. While the lane hedges, not yet down, a connection's failure
// is recorded too (a refused dial says more than the missing answer the
// hedge's give-up notes).
func (l *lane) lateError(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down && (l.cause == nil || !timeoutLike(err)) || l.hedging && connFailure(err) {
		l.cause = err
	}
}

// connFailure reports whether err is a connection's failure that is not
// a timeout: a refused dial, a reset or dropped connection. Not an error
// reply (the endpoint answered) nor a mere lack of an answer.
func connFailure(err error) bool {
	if err == nil || timeoutLike(err) {
		return false
	}
	var re redis.Error
	return !errors.As(err, &re)
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
		// dropped, say). So also while the lane hedges (its first probe
		// is tried then): the call given up later, the lane down, may
		// lose its locks before its own probe comes back.
		if err != nil && (l.down || l.hedging) && l.w.ctx.Err() == nil && !timeoutLike(err) {
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
