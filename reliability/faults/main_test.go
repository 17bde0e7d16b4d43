package faults_test

import (
	"testing"

	"github.com/lockwatch/lockwatch/internal/testredis"
)

func TestMain(m *testing.M) {
	testredis.VerifyTestMain(m)
}

// skipShort skips a scenario under go test -short: each runs for seconds of
// real time against a real server (go test ./... runs them all).
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a real-time fault scenario of several seconds; skipped with -short")
	}
}
