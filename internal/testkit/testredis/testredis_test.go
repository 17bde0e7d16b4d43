package testredis

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// do sends one inline command to addr on a fresh connection and returns the
// reply's first line; for a bulk string its content, for an array of bulk
// strings their contents joined by spaces.
func do(t testing.TB, addr, cmd string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("dial %s: got %v, want nil", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		t.Fatalf("%s: write: got %v, want nil", cmd, err)
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: read: got %v, want nil", cmd, err)
	}
	line = strings.TrimSuffix(line, "\r\n")
	if n, ok := strings.CutPrefix(line, "*"); ok {
		count, _ := strconv.Atoi(n)
		var parts []string
		for i := 0; i < count; i++ {
			if _, err := r.ReadString('\n'); err != nil { // $len
				t.Fatalf("%s: read array: got %v, want nil", cmd, err)
			}
			body, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("%s: read array: got %v, want nil", cmd, err)
			}
			parts = append(parts, strings.TrimSuffix(body, "\r\n"))
		}
		return strings.Join(parts, " ")
	}
	if strings.HasPrefix(line, "$") && line != "$-1" {
		body, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: read bulk: got %v, want nil", cmd, err)
		}
		return strings.TrimSuffix(body, "\r\n")
	}
	return line
}

// TestRestartWithoutPersistence: a restart keeps the address and the
// directory, runs a new process, and loses every key.
func TestRestartWithoutPersistence(t *testing.T) {
	s := Start(t)
	if got := do(t, s.Addr, "SET k v"); got != "+OK" {
		t.Fatalf("SET = %q, want +OK", got)
	}
	addr, dir, pid := s.Addr, s.Dir, s.Pid()
	s.Restart(t)
	if s.Addr != addr || s.Dir != dir {
		t.Errorf("after Restart: (Addr, Dir) = (%q, %q), want (%q, %q)", s.Addr, s.Dir, addr, dir)
	}
	if s.Pid() == pid {
		t.Errorf("after Restart: Pid() = %d, the old process's, want a new one", pid)
	}
	if !s.Running() {
		t.Errorf("after Restart: Running() = false, want true")
	}
	if got := do(t, s.Addr, "GET k"); got != "$-1" {
		t.Errorf("GET k after a restart without persistence = %q, want $-1 (nil)", got)
	}
}

// TestRestartWithAppendOnly: keys written with the append-only file on
// survive SIGKILL and a restart, with their expiry.
func TestRestartWithAppendOnly(t *testing.T) {
	s := StartWith(t, Options{AppendOnly: true})
	if got := do(t, s.Addr, "SET k v PX 600000"); got != "+OK" {
		t.Fatalf("SET = %q, want +OK", got)
	}
	s.Kill(t)
	if s.Running() {
		t.Fatalf("after Kill: Running() = true, want false")
	}
	if err := Ping(s.Addr); err == nil {
		t.Fatalf("Ping after Kill = nil, want an error")
	}
	s.Kill(t) // idempotent
	s.Restart(t)
	if got := do(t, s.Addr, "GET k"); got != "v" {
		t.Errorf("GET k after SIGKILL and a restart with appendonly = %q, want %q", got, "v")
	}
	if got := do(t, s.Addr, "PTTL k"); !strings.HasPrefix(got, ":") || got == ":-1" || got == ":-2" {
		t.Errorf("PTTL k after the restart = %q, want a positive TTL", got)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "appendonlydir")); err != nil {
		t.Errorf("append-only directory in %s: got %v, want it present", s.Dir, err)
	}
}

// TestStopThenRestart: Stop ends the process; Restart after Stop starts
// one; the cleanup copes with either.
func TestStopThenRestart(t *testing.T) {
	s := Start(t)
	s.Stop(t)
	if err := Ping(s.Addr); err == nil {
		t.Fatalf("Ping after Stop = nil, want an error")
	}
	s.Stop(t) // idempotent
	s.Restart(t)
	if err := Ping(s.Addr); err != nil {
		t.Errorf("Ping after Restart = %v, want nil", err)
	}
}

// TestStartWithPortAndDir: the given port and directory are used.
func TestStartWithPortAndDir(t *testing.T) {
	port, err := reservePort(t)
	if err != nil {
		t.Fatalf("reservePort: got %v, want nil", err)
	}
	dir := t.TempDir()
	s := StartWith(t, Options{Port: port, Dir: dir, AppendOnly: true})
	if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(port)); s.Addr != want {
		t.Errorf("Addr = %q, want %q", s.Addr, want)
	}
	if s.Dir != dir {
		t.Errorf("Dir = %q, want %q", s.Dir, dir)
	}
	for _, c := range []struct{ cmd, want string }{
		{"CONFIG GET dir", "dir " + dir},
		{"CONFIG GET appendonly", "appendonly yes"},
		{"CONFIG GET appendfsync", "appendfsync always"},
	} {
		if got := do(t, s.Addr, c.cmd); got != c.want {
			t.Errorf("%s = %q, want %q", c.cmd, got, c.want)
		}
	}
}
