package faults_test

import (
	"testing"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

func TestMain(m *testing.M) {
	testredis.VerifyTestMain(m)
}

// skipShort skips a scenario under go test -short: each runs for seconds of
// real time against a real server (go test ./... runs them all).
func skipShort(t *testing.T) {
	t.Helper()
	harness.SkipShort(t, "a real-time fault scenario of several seconds")
}
