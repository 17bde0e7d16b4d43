package testredis

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestStartAndStop starts a server, pings it, and checks that the cleanup
// stops the process by its pid.
func TestStartAndStop(t *testing.T) {
	var pid int
	t.Run("server", func(t *testing.T) {
		s := Start(t)
		if err := Ping(s.Addr); err != nil {
			t.Fatalf("Ping(%s) = %v, want nil", s.Addr, err)
		}
		if !strings.HasPrefix(s.Addr, "127.0.0.1:") {
			t.Errorf("Addr = %q, want a loopback address", s.Addr)
		}
		pid = s.Pid()
	})
	if pid == 0 {
		return // skipped: no redis-server
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatalf("FindProcess(%d) = %v, want nil", pid, err)
	}
	if err := p.Signal(syscall.Signal(0)); err == nil {
		t.Errorf("redis-server pid %d still runs after cleanup, want it stopped", pid)
	}
}

// TestTwoServers checks that two servers get different ports.
func TestTwoServers(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Addr == b.Addr {
		t.Fatalf("two servers on %s, want different addresses", a.Addr)
	}
}

// TestMissingServer runs Start with an empty PATH in a child process:
// it skips, or fails when LOCKWATCH_REQUIRE_REDIS=1.
func TestMissingServer(t *testing.T) {
	if os.Getenv("TESTREDIS_CHILD") == "1" {
		Start(t)
		t.Fatal("Start returned without redis-server on PATH")
		return
	}
	for _, c := range []struct {
		require string
		want    string
		fails   bool
	}{
		{require: "", want: "--- SKIP", fails: false},
		{require: "1", want: "--- FAIL", fails: true},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingServer$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTREDIS_CHILD=1", "PATH=", RequireEnv+"="+c.require)
		out, err := cmd.CombinedOutput()
		if (err != nil) != c.fails || !strings.Contains(string(out), c.want) {
			t.Errorf("%s=%q without redis-server: got error %v and output\n%s\nwant %q (fails: %v)", RequireEnv, c.require, err, out, c.want, c.fails)
		}
	}
}
