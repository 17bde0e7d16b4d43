package exclusion_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs a worker process of TestMutualExclusionUnderContention when
// the environment asks for one (before goleak: a worker exits on its own),
// and the tests otherwise.
func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(workerEnv); ok {
		os.Exit(runWorker(spec))
	}
	goleak.VerifyTestMain(m)
}
