package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server this command started.
type server struct {
	addr string
	cmd  *exec.Cmd
	dir  string
}

// errNoServer is returned when no -redis address is given and redis-server
// is not on PATH.
var errNoServer = errors.New("redis-server is not on PATH: install it (Debian: apt-get install redis-server) or pass -redis host:port")

// startServer runs redis-server on a free loopback port, without
// persistence, with the extra arguments, and waits until it answers PING.
// It stops the process (by pid) if it does not answer, or when ctx ends
// before it does.
func startServer(ctx context.Context, extra ...string) (*server, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoServer
	}
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "lockwatch-bench-")
		if err != nil {
			return nil, err
		}
		s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
		s.cmd = exec.Command(path, append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			// A million keys with a million-key sweep: the default
			// limits are far away, this only documents the setup.
			"--maxclients", "10000", "--loglevel", "warning"}, extra...)...)
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := s.cmd.Start(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("start %s: %w", path, err)
		}
		if last = waitPing(ctx, s.addr, 10*time.Second); last == nil {
			return s, nil
		}
		s.stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("redis-server did not answer PING: %w", last)
}

func (s *server) stop() {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	_ = os.RemoveAll(s.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitPing(ctx context.Context, addr string, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serverInfo is what the bench reads from INFO.
type serverInfo struct {
	version string
	cpu     float64 // used_cpu_user + used_cpu_sys, seconds
}

func readInfo(ctx context.Context, c *redis.Client) (serverInfo, error) {
	txt, err := c.Info(ctx, "server", "cpu").Result()
	if err != nil {
		return serverInfo{}, fmt.Errorf("INFO: %w", err)
	}
	var si serverInfo
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch k {
		case "redis_version":
			si.version = v
		case "used_cpu_user", "used_cpu_sys":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return serverInfo{}, fmt.Errorf("INFO %s=%q: %w", k, v, err)
			}
			si.cpu += f
		}
	}
	return si, nil
}
