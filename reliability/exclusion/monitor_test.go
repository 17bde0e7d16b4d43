package exclusion_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// monitor records every command a Redis server executes, through the
// MONITOR command on a raw TCP connection (go-redis v9.4 has no MONITOR).
// Its lines are kept as they come and parsed after the run.
type monitor struct {
	conn net.Conn
	end  string // the ECHO argument that ends the recording

	mu    sync.Mutex // guards lines
	lines []string

	seenEnd chan struct{} // closed when the end marker was read
	done    chan struct{} // closed when the reader goroutine returned
	err     error         // the reader's error; valid once done is closed
}

// startMonitor connects to addr and sends MONITOR; the monitor is stopped
// by stop or, at the latest, by t.Cleanup.
func startMonitor(t testing.TB, addr string) *monitor {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s for MONITOR: %v", addr, err)
	}
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	m := &monitor{
		conn:    conn,
		end:     "monitor-end-" + hex.EncodeToString(nonce),
		seenEnd: make(chan struct{}),
		done:    make(chan struct{}),
	}
	r := bufio.NewReaderSize(conn, 1<<16)
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		conn.Close()
		t.Fatalf("send MONITOR: %v", err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		conn.Close()
		t.Fatalf("MONITOR answered %q, %v; want +OK", line, err)
	}
	_ = conn.SetDeadline(time.Time{})
	go m.read(r)
	t.Cleanup(func() {
		m.conn.Close()
		<-m.done
	})
	return m
}

func (m *monitor) read(r *bufio.Reader) {
	defer close(m.done)
	ended := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if !ended {
				m.err = err
			}
			return
		}
		line = strings.TrimSuffix(line, "\r\n")
		m.mu.Lock()
		m.lines = append(m.lines, line)
		m.mu.Unlock()
		if !ended && strings.Contains(line, m.end) {
			ended = true
			close(m.seenEnd)
		}
	}
}

// stop sends the end marker through c, waits until the monitor has read
// everything up to it, closes the connection and returns the lines.
func (m *monitor) stop(ctx context.Context, c *redis.Client) ([]string, error) {
	if err := c.Echo(ctx, m.end).Err(); err != nil {
		return nil, fmt.Errorf("ECHO end marker: %w", err)
	}
	var err error
	select {
	case <-m.seenEnd:
	case <-m.done:
		err = fmt.Errorf("MONITOR connection ended before the end marker: %v", m.err)
	case <-ctx.Done():
		err = fmt.Errorf("end marker not seen on MONITOR: %w", ctx.Err())
	}
	m.conn.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lines, err
}

// monLine is one command of the MONITOR stream.
type monLine struct {
	lua  bool     // run by a script (client "lua"), not sent by a client
	args []string // the command and its arguments, as sent
}

// name returns the command name in lower case.
func (l monLine) name() string {
	if len(l.args) == 0 {
		return ""
	}
	return strings.ToLower(l.args[0])
}

// parseMonitorLine parses a MONITOR line such as
//
//	+1700000000.123456 [0 127.0.0.1:50000] "evalsha" "ab..." "1" "key"
//
// where each argument is quoted and escaped as Redis's sdscatrepr does.
func parseMonitorLine(s string) (monLine, error) {
	rest, ok := strings.CutPrefix(s, "+")
	if !ok {
		return monLine{}, fmt.Errorf("MONITOR line %q: no leading +", s)
	}
	open := strings.IndexByte(rest, '[')
	closing := strings.IndexByte(rest, ']')
	if open < 0 || closing < open {
		return monLine{}, fmt.Errorf("MONITOR line %q: no [db client]", s)
	}
	var l monLine
	who := strings.Fields(rest[open+1 : closing])
	l.lua = len(who) == 2 && who[1] == "lua"
	args, err := unquoteArgs(rest[closing+1:])
	if err != nil {
		return monLine{}, fmt.Errorf("MONITOR line %q: %w", s, err)
	}
	l.args = args
	return l, nil
}

// unquoteArgs splits ` "a" "b\"c"` into its unescaped arguments.
func unquoteArgs(s string) ([]string, error) {
	var out []string
	i := 0
	for {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i == len(s) {
			return out, nil
		}
		if s[i] != '"' {
			return nil, fmt.Errorf("argument at %d does not start with a quote", i)
		}
		i++
		var b strings.Builder
		for {
			if i >= len(s) {
				return nil, errors.New("unterminated argument")
			}
			c := s[i]
			if c == '"' {
				i++
				break
			}
			if c != '\\' {
				b.WriteByte(c)
				i++
				continue
			}
			if i+1 >= len(s) {
				return nil, errors.New("dangling backslash")
			}
			switch e := s[i+1]; e {
			case '\\', '"':
				b.WriteByte(e)
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+3 >= len(s) {
					return nil, errors.New("short \\x escape")
				}
				v, err := strconv.ParseUint(s[i+2:i+4], 16, 8)
				if err != nil {
					return nil, fmt.Errorf("bad \\x escape: %w", err)
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				return nil, fmt.Errorf("unknown escape \\%c", e)
			}
			i += 2
		}
		out = append(out, b.String())
	}
}

// groupScripts groups the stream into commands sent by clients, each with the
// commands its script ran (for EVAL and EVALSHA). luaFirst says whether
// this server logs a script's commands before the script call.
func groupScripts(lines []monLine, luaFirst bool) (clientCmds []monLine, ran [][]monLine) {
	var pending []monLine
	for _, l := range lines {
		if l.lua {
			if luaFirst {
				pending = append(pending, l)
			} else if len(ran) > 0 {
				ran[len(ran)-1] = append(ran[len(ran)-1], l)
			}
			continue
		}
		clientCmds = append(clientCmds, l)
		if luaFirst {
			ran = append(ran, pending)
			pending = nil
		} else {
			ran = append(ran, nil)
		}
	}
	return clientCmds, ran
}
