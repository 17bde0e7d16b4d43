package registry

// EventKind says what happened to a tracked lock.
type EventKind uint8

const (
	// EventObtained: the hook saw a lock obtained; it is now tracked.
	EventObtained EventKind = iota + 1
	// EventRefreshed: the hook saw the holder refresh a tracked lock.
	EventRefreshed
	// EventReleased: the hook saw the holder release a tracked lock; it is untracked.
	EventReleased
	// EventNotHeld: the hook saw a refresh answer that the lock is not held; it is untracked.
	EventNotHeld
	// EventDropped: the watchdog untracked the lock: it found it lost
	// (gone, taken, unreachable, its quorum lost), or its max hold passed.
	EventDropped
)

// String returns the event kind's name in lower case.
func (k EventKind) String() string {
	switch k {
	case EventObtained:
		return "obtained"
	case EventRefreshed:
		return "refreshed"
	case EventReleased:
		return "released"
	case EventNotHeld:
		return "not-held"
	case EventDropped:
		return "dropped"
	}
	return "unknown"
}

// Event reports a change to the table of tracked locks.
type Event struct {
	Kind EventKind
	Lock Lock
}
