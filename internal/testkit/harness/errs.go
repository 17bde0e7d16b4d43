package harness

import (
	"errors"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"

	"github.com/lockwatch/lockwatch/watchdog"
)

// Sentinel is an error that a test tells errors apart by, with the name it
// shows it by.
type Sentinel struct {
	Name string
	Err  error
}

// WatchdogSentinels are package watchdog's sentinel errors, ErrLost first.
var WatchdogSentinels = []Sentinel{
	{"ErrLost", watchdog.ErrLost},
	{"ErrLockGone", watchdog.ErrLockGone},
	{"ErrLockTaken", watchdog.ErrLockTaken},
	{"ErrQuorumLost", watchdog.ErrQuorumLost},
	{"ErrUnreachable", watchdog.ErrUnreachable},
	{"ErrUnconfirmed", watchdog.ErrUnconfirmed},
	{"ErrMaxHold", watchdog.ErrMaxHold},
	{"ErrReleased", watchdog.ErrReleased},
	{"ErrStopped", watchdog.ErrStopped},
	{"ErrNotTracked", watchdog.ErrNotTracked},
}

// UpstreamSentinels are the sentinel errors of redislock and redsync that
// business code tells apart.
var UpstreamSentinels = []Sentinel{
	{"redislock.ErrNotObtained", redislock.ErrNotObtained},
	{"redislock.ErrLockNotHeld", redislock.ErrLockNotHeld},
	{"redsync.ErrFailed", redsync.ErrFailed},
	{"redsync.ErrExtendFailed", redsync.ErrExtendFailed},
	{"redsync.ErrLockAlreadyExpired", redsync.ErrLockAlreadyExpired},
}

// Matching returns the names of the sentinels err matches (errors.Is), in
// the order of sentinels.
func Matching(err error, sentinels ...Sentinel) []string {
	var names []string
	for _, s := range sentinels {
		if errors.Is(err, s.Err) {
			names = append(names, s.Name)
		}
	}
	return names
}

// FirstMatch returns the name of the first sentinel err matches, or
// otherwise.
func FirstMatch(err error, otherwise string, sentinels ...Sentinel) string {
	if names := Matching(err, sentinels...); len(names) > 0 {
		return names[0]
	}
	return otherwise
}
