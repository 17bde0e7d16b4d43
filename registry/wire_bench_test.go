package registry_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/internal/testkit/memconn"
	"github.com/lockwatch/lockwatch/registry"
)

// wireClient returns a client whose connections are in-memory pipes to
// respond, a stand-in server in this process. Unlike the answer hook, the
// commands take go-redis's whole path: its connection pool, the RESP writer
// and reader. That path decides how deep the stack of the goroutine redsync
// starts for each acquire gets, and so whether the registry's hook, which
// runs on that goroutine, makes it grow: an answer hook ends the path
// before go-redis's connection code, which grows a 2 KB stack by itself.
func wireClient(b testing.TB, watched bool) (*redis.Client, *registry.Registry) {
	b.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:     memconn.Addr,
		Protocol: 2,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			client, server := net.Pipe()
			go respond(server)
			return memconn.New(client), nil
		},
	})
	b.Cleanup(func() { _ = c.Close() })
	var reg *registry.Registry
	if watched {
		reg = registry.New(bsmredislock.New(), goredsync.New())
		if err := reg.Watch(c); err != nil {
			b.Fatal(err)
		}
	}
	return c, reg
}

// respond serves conn as a server that holds nothing would, for the
// commands of these benchmarks: SET answers OK, a script answers 1 (which
// redsync reads as unlocked and the watchdog as renewed), anything else
// (go-redis's connection set-up) an error that go-redis ignores.
func respond(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	w := bufio.NewWriter(conn)
	for {
		name, err := readCommand(r)
		if err != nil {
			return
		}
		switch name {
		case "set":
			_, _ = w.WriteString("+OK\r\n")
		case "eval", "evalsha":
			_, _ = w.WriteString(":1\r\n")
		default:
			_, _ = w.WriteString("-ERR unknown command\r\n")
		}
		if r.Buffered() == 0 {
			if w.Flush() != nil {
				return
			}
		}
	}
}

// readCommand reads one RESP array of bulk strings and returns its first
// element in lower case.
func readCommand(r *bufio.Reader) (string, error) {
	n, err := readLength(r, '*')
	if err != nil {
		return "", err
	}
	var name string
	for i := range n {
		size, err := readLength(r, '$')
		if err != nil {
			return "", err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		if i == 0 {
			name = strings.ToLower(string(buf[:size]))
		}
	}
	return name, nil
}

func readLength(r *bufio.Reader, kind byte) (int, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 3 || line[0] != kind {
		return 0, io.ErrUnexpectedEOF
	}
	return strconv.Atoi(strings.TrimSuffix(line[1:], "\r\n"))
}

// redsync's acquire through go-redis's whole client path, unwatched,
// watched by a registry, and with a watchdog attached too (as in
// BenchmarkRedsyncLock, every mutex is in the fast lane and none comes due
// within a run). The difference between the variants is what the
// application sees; the target is at most 500 ns.
func BenchmarkRedsyncLockWire(b *testing.B) { benchRedsyncLock(b, wireClient) }

// BenchmarkRedsyncLockWirePaired is BenchmarkRedsyncLockWire with the
// three modes taking turns, as BenchmarkRedsyncLockPaired does.
func BenchmarkRedsyncLockWirePaired(b *testing.B) { benchRedsyncPaired(b, wireClient) }
