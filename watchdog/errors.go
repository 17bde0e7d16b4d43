package watchdog

import (
	"errors"
	"fmt"
)

// Reasons passed to the OnLost function; compare with errors.Is.
var (
	// ErrLost matches both [ErrLockGone] and [ErrLockTaken]: Redis answered
	// that this process no longer holds the lock.
	ErrLost = errors.New("watchdog: lock lost")
	// ErrLockGone: the lock's key no longer exists (deleted, or expired).
	ErrLockGone error = &lostError{"watchdog: lock lost: key gone (deleted or expired)"}
	// ErrLockTaken: the lock's key holds another value: another owner has it.
	ErrLockTaken error = &lostError{"watchdog: lock lost: key holds another owner's value"}
	// ErrUnreachable: renewals failed until the lock's TTL since its last
	// confirmed renewal had passed; it may have expired while Redis could
	// not be reached. The error OnLost receives wraps the last renewal error too.
	ErrUnreachable = errors.New("watchdog: lock expired while Redis was unreachable")
	// ErrMaxHold: the lock was held for the max hold; renewal stopped.
	ErrMaxHold = errors.New("watchdog: max hold reached")

	// ErrNilRegistry is returned by [Attach] for a nil registry.
	ErrNilRegistry = errors.New("watchdog: nil registry")
	// ErrNoAdapters is returned by [Attach] for a registry without adapters.
	ErrNoAdapters = errors.New("watchdog: registry has no adapters: pass them to registry.New")
	// ErrAttached is returned by [Attach] when another watchdog is attached
	// to the same registry and not stopped.
	ErrAttached = errors.New("watchdog: registry already has an attached watchdog")
	// ErrStopped is returned by [Watchdog.Sweep] after Stop.
	ErrStopped = errors.New("watchdog: stopped")
)

// errNoConfirmation is the reason given when a lock's TTL since its last
// confirmed renewal ran out while its renewals kept failing.
var errNoConfirmation = fmt.Errorf("%w: no renewal confirmed within the lock's TTL", ErrUnreachable)

type lostError struct{ msg string }

func (e *lostError) Error() string        { return e.msg }
func (e *lostError) Is(target error) bool { return target == ErrLost }
