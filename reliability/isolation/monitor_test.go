package isolation_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
)

// scriptedSpy answers each states call with the next of its answers.
type scriptedSpy struct{ answers []harness.KeyState }

func (s *scriptedSpy) states(keys []string) map[string]harness.KeyState {
	st := s.answers[0]
	s.answers = s.answers[1:]
	out := map[string]harness.KeyState{}
	for _, k := range keys {
		out[k] = st
	}
	return out
}

// TestMonitorTimesRenewalByPTTL: a spy that cannot read a lock's shard
// for a while (CI run 71: a cluster spy 3.6 s behind a failover) finds the
// renewal only when it reads again. The monitor must date the renewal by
// the PTTL it read (the key's TTL minus the PTTL before the read), not by
// the read: the old monitor dated it at the read (in CI run 71, seconds
// after the renewal), and failed TestClusterMasterKilled's bound.
func TestMonitorTimesRenewalByPTTL(t *testing.T) {
	h := &harness.Held{Lib: "redislock", Key: "k", Value: "v", TTL: 15 * time.Second}
	down := errors.New("the shard cannot be read")
	s := &scriptedSpy{answers: []harness.KeyState{
		{Exists: true, Value: "v", PTTL: 10 * time.Second}, // read before the gap
		{Err: down},
		{Exists: true, Value: "v", PTTL: 14900 * time.Millisecond}, // renewed 100 ms before this read
	}}
	m := newMonitor(s, time.Now(), []*harness.Held{h})
	start := time.Now()
	m.sampleOnce()
	m.sampleOnce()
	time.Sleep(300 * time.Millisecond) // the gap
	m.sampleOnce()
	read := time.Now()
	at := m.renewedAfter(h, start)
	if at.IsZero() {
		t.Fatal("no renewal found, want the PTTL's rise from 10 s to 14.9 s")
	}
	if want := read.Add(-100 * time.Millisecond); at.After(want) {
		t.Errorf("renewal dated %v before the last read, want at least 100ms (the TTL of 15s minus the PTTL of 14.9s read)", read.Sub(at))
	}
	if at.Before(start) {
		t.Errorf("renewal dated %v before the first read, want no earlier than it (the PTTL rose after it)", start.Sub(at))
	}
}
