package watchdog

import (
	"testing"
	"time"
)

// A call's tell time is computed when it is sent, for the scheduler's lag
// then. When the lag grows while the call waits, its holders are told
// that much earlier (tellMargin): the scheduler must wake for the earlier
// time, not the one computed at the send.
func TestTellWakeFollowsLag(t *testing.T) {
	const ms = int64(time.Millisecond)
	p := &pipe{hedgeAt: 10_000 * ms, tellAt: 1_000 * ms, tellLag: 5 * ms}
	p.state.Store(pipeRunning)
	p.sentNs.Store(50 * ms) // sent: a call not sent yet is looked at again soon (hedgeTime)
	l := &lane{flight: []*pipe{p}}
	r := &passRun{l: l, nowNs: 100 * ms, tellLag: 50 * ms}
	r.flights()
	if want := 1_000*ms - lagFactor*45*ms; r.next != want || p.tellLag != 50*ms {
		t.Errorf("after the lag grew from 5 ms to 50 ms: wake at %v, tell lag %v; want a wake at %v (%d x 45 ms earlier), tell lag 50ms",
			time.Duration(r.next), time.Duration(p.tellLag), time.Duration(want), lagFactor)
	}
	r = &passRun{l: l, nowNs: 100 * ms, tellLag: 20 * ms}
	before := p.tellAt
	r.flights()
	if p.tellAt != before || r.next != before {
		t.Errorf("after the lag fell: tell time %v, wake %v; want both kept at %v (a lag that falls tells no later)",
			time.Duration(p.tellAt), time.Duration(r.next), time.Duration(before))
	}
}
