package watchdog

import (
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// A lock's times, in ns since the set's epoch, all counted from C, when
// the last renewal (or obtain, or refresh) that Redis confirmed was sent:
//
//   - renewAt: a third of the TTL has passed, as an application
//     refreshing by hand would renew it; it is renewed then, or up to a
//     twelfth of the TTL earlier to share the call of a lock due before it
//     (earlyBy); earlier by lagFactor times the scheduler's lag, up to a
//     sixth of the TTL (a starved process needs more turns of its
//     goroutines to have a renewal confirmed, and stalls again when it
//     likes). A third of the TTL and a third to confirm the renewal keep
//     I2's third: an endpoint that answers within a third of the TTL keeps
//     every lock above a third.
//   - deadline: two thirds have passed; a renewal sent later leaves less
//     than a third of the TTL (I2) and counts as a deadline missed.
//   - expiry E: C plus the TTL, the earliest instant its key may expire.
//   - tell time: E minus Redlock's drift allowance (the TTL/100 + 2 ms by
//     which Redis's clock may run ahead), minus lagFactor times the
//     process's own lateness, up to a quarter of the TTL (tellMargin; the
//     largest of the scheduler's lag and starvation, how long goroutines
//     wait for a CPU, and how late the wake probe is woken: passRun.tellLag):
//     when no renewal was confirmed by then, the holder's contexts are
//     cancelled with ErrUnconfirmed (I15), before anyone else can take the
//     key. A lateness that grows moves every tell time still to come
//     earlier (flights, retell).
//   - give-up time: E plus lagFactor times the lag (up to a second TTL):
//     a lock still unconfirmed then, with no renewal of it on its way, is
//     given up as unreachable (I12). A renewal the lane stopped waiting
//     for (hedged), sent before E, moves E to its send time plus the TTL,
//     answer or not: Redis may have applied it as it came. An obtain or
//     refresh answered more than a third of its TTL after it was sent (a
//     stalled server) moves it to its answer plus the TTL: Redis set the
//     TTL at some instant between the two (table.answeredLateLocked).

// tellSlack is how long before its tell time a holder is told at the
// least: the time the cancellation takes to reach the job.
const tellSlack = time.Millisecond

// drift is Redlock's allowance for clock drift over ttl.
func drift(ttl time.Duration) int64 { return int64(ttl)/100 + int64(2*time.Millisecond) }

// expiry is E.
func expiry(e *table.Entry) int64 { return e.Confirmed + int64(e.TTL) }

// tellKey orders the ready queue: E minus the drift allowance.
func tellKey(e *table.Entry) int64 { return expiry(e) - drift(e.TTL) }

// tellMargin is how much earlier than its tell key a lock of ttl is told,
// for a scheduler lagging by lag.
func tellMargin(ttl time.Duration, lag int64) int64 {
	return min(lagFactor*lag+int64(tellSlack), int64(ttl)/4)
}

// tellAt is when e's holder is told, at the latest, for a scheduler
// lagging by lag.
func tellAt(e *table.Entry, lag int64) int64 { return tellKey(e) - tellMargin(e.TTL, lag) }

// renewAt is when e is renewed, for a scheduler lagging by lag.
func renewAt(e *table.Entry, lag int64) int64 {
	return e.Confirmed + int64(e.TTL)/3 - min(lagFactor*lag, int64(e.TTL)/6)
}

// deadlineOf is when e must have been renewed to keep a third of its TTL.
func deadlineOf(e *table.Entry) int64 { return e.Confirmed + 2*int64(e.TTL)/3 }

// giveUpTime is when e, unconfirmed, is given up, for a scheduler lagging
// by lag: lagFactor times the lag (up to a TTL) after its key may have
// expired (table.MayLiveUntilLocked: a renewal the lane stopped waiting
// for, sent while the key was held, may have renewed it, answer or not)
// or, while such a renewal may still answer, a quarter of its TTL after
// its expiry at the least, so that an answer that comes late says what
// Redis holds (gone, taken, or renewed). The table must be locked.
func giveUpTime(t *table.Table, e *table.Entry, lag int64) int64 {
	at := t.MayLiveUntilLocked(e) + min(lagFactor*lag, int64(e.TTL))
	if t.LateLocked(e) {
		at = max(at, expiry(e)+int64(e.TTL)/4)
	}
	return at
}

// needsFast reports whether a lock confirmed at confirmed with ttl must be
// renewed before the tick at next (all in ns since the set's epoch): its
// deadline (a third of the TTL left, plus a twelfth as margin) comes before
// the tick, give or take tol.
func needsFast(ttl time.Duration, confirmed, next int64, tol time.Duration) bool {
	deadline := confirmed + int64(2*ttl/3-ttl/12)
	return deadline < next+int64(tol)
}
