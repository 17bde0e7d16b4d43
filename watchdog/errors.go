package watchdog

import (
	"errors"
	"fmt"
	"time"
)

// Reasons passed to the OnLost function; compare with errors.Is.
var (
	// ErrLost is the one sentinel for "no longer held": every loss reason
	// matches it, [ErrLockGone], [ErrLockTaken], [ErrQuorumLost] and
	// [ErrUnreachable] (an [*UnreachableError]), so that
	// errors.Is(context.Cause(jobCtx), ErrLost) catches every loss.
	// [ErrMaxHold], [ErrReleased] and [ErrStopped] do not match it: the
	// lock may still be held then, but nothing renews it any more.
	ErrLost = errors.New("watchdog: lock lost")
	// ErrLockGone: a key of the lock no longer exists (deleted, or expired).
	ErrLockGone error = &lostError{"watchdog: lock lost: key gone (deleted or expired)"}
	// ErrLockTaken: a key of the lock holds another value: another owner
	// has it.
	ErrLockTaken error = &lostError{"watchdog: lock lost: key holds another owner's value"}
	// ErrUnreachable: renewals failed until the lock's TTL since its last
	// confirmed renewal had passed, so it may have expired while Redis
	// could not be reached; or the application closed the client it was
	// obtained through. The error OnLost receives is an
	// *[UnreachableError] that names the endpoint and wraps the last
	// renewal error (errors.Is and errors.As reach it). It matches
	// [ErrLost].
	ErrUnreachable error = &lostError{"watchdog: lock expired while Redis was unreachable"}
	// ErrUnconfirmed is the cause of a [Watchdog.Context] cancelled because
	// no renewal of the lock was confirmed in time: its key may expire on
	// the server within the TTL/100 + 2 ms that Redis's clock may run
	// ahead (Redlock's drift allowance), after which anyone could take
	// it. The job hears it before that instant, not after. The lock may
	// still be held: the watchdog keeps renewing it, and reports it to
	// OnLost only if it is lost (then with what Redis said, or
	// ErrUnreachable). It matches [ErrLost].
	// The cause is an *[UnconfirmedError] naming the endpoint and the
	// last renewal error.
	ErrUnconfirmed error = &lostError{"watchdog: lock may be lost: no renewal confirmed in time"}
	// ErrMaxHold: the lock was held for the max hold; renewal stopped.
	ErrMaxHold = errors.New("watchdog: max hold reached")
	// ErrQuorumLost: a redsync mutex over several Redis servers (Redlock)
	// is held on fewer than a majority of the servers its acquire used;
	// its other copies are no longer renewed, so that another process can
	// take it within its TTL. It matches [ErrLost].
	ErrQuorumLost error = &lostError{"watchdog: lock lost: fewer than a majority of its servers hold it"}
	// ErrReleased is the cause of a [Watchdog.Context] cancelled because
	// the holder released the lock.
	ErrReleased = errors.New("watchdog: lock released by its holder")
	// ErrNotTracked is the cause of a [Watchdog.Context] cancelled at once:
	// no lock with that key was tracked when Context was called.
	ErrNotTracked = errors.New("watchdog: no tracked lock has that key")

	// ErrNilRegistry is returned by [Attach] for a nil registry.
	ErrNilRegistry = errors.New("watchdog: nil registry")
	// ErrNoAdapters is returned by [Attach] for a registry without adapters.
	ErrNoAdapters = errors.New("watchdog: registry has no adapters: pass them to registry.New")
	// ErrAttached is returned by [Attach] when another watchdog is attached
	// to the same registry and not stopped.
	ErrAttached = errors.New("watchdog: registry already has an attached watchdog")
	// ErrNilWatchdog is returned by the methods of a nil *Watchdog (the
	// error path of wd, err := Attach(...)), except Stop, which does
	// nothing.
	ErrNilWatchdog = errors.New("watchdog: nil *Watchdog (Attach failed?)")
	// ErrStopped is returned by [Watchdog.Sweep] after Stop, and is the
	// cause of a [Watchdog.Context] cancelled because the watchdog stopped
	// (nothing renews the lock any more).
	ErrStopped = errors.New("watchdog: stopped")
)

// UnreachableError is the reason OnLost gets for a lock given up because
// its renewals kept failing, or because its client was closed. It matches
// [ErrUnreachable] and unwraps to the last renewal error (redis.ErrClosed,
// a timeout, a refused connection, a TRYAGAIN or CLUSTERDOWN reply...).
// When renewals only time out (go-redis v9.23 retries a refused dial until
// the renewal's deadline), the watchdog dials the endpoint once, as its
// client would, and a dial error it gets is the one wrapped.
type UnreachableError struct {
	// Endpoint names where the renewals were sent: the client's address,
	// or the cluster node's.
	Endpoint string
	// Err is the last renewal error; nil only when no renewal was tried.
	Err error
}

func (e *UnreachableError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%v (%s)", ErrUnreachable, e.Endpoint)
	}
	return fmt.Sprintf("%v (%s): %v", ErrUnreachable, e.Endpoint, e.Err)
}

// Is reports whether target is [ErrUnreachable] or [ErrLost].
func (e *UnreachableError) Is(target error) bool {
	return target == ErrUnreachable || target == ErrLost
}

// Unwrap returns the last renewal error.
func (e *UnreachableError) Unwrap() error { return e.Err }

type lostError struct{ msg string }

func (e *lostError) Error() string        { return e.msg }
func (e *lostError) Is(target error) bool { return target == ErrLost }

// UnconfirmedError is the cause of a [Watchdog.Context] cancelled because no
// renewal of its lock was confirmed in time (I15). It matches
// [ErrUnconfirmed] and [ErrLost], and unwraps to the last renewal error of
// the endpoint, when there was one (a timeout, a refused connection...).
type UnconfirmedError struct {
	// Endpoint names where the renewals were sent: the client's address,
	// or the cluster node's.
	Endpoint string
	// Expiry is the earliest instant the lock's key may expire on the
	// server: the send time of the last renewal Redis confirmed plus its
	// TTL. The holder was told before Expiry less Redis's drift allowance.
	Expiry time.Time
	// Err is the endpoint's last renewal error; nil when there was none
	// (its renewals are late, not failing).
	Err error
}

func (e *UnconfirmedError) Error() string {
	msg := fmt.Sprintf("%v (%s; may expire at %s)", ErrUnconfirmed, e.Endpoint, e.Expiry.Format(time.RFC3339Nano))
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is [ErrUnconfirmed] or [ErrLost].
func (e *UnconfirmedError) Is(target error) bool {
	return target == ErrUnconfirmed || target == ErrLost
}

// Unwrap returns the endpoint's last renewal error.
func (e *UnconfirmedError) Unwrap() error { return e.Err }
