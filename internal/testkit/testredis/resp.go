package testredis

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ReplyError is an error reply from the server ("-ERR ...", "-MOVED ...").
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// DoTimeout bounds one [Do]: dialling, writing and reading the reply.
const DoTimeout = 5 * time.Second

// Do sends one command to addr on a fresh connection, without a client
// library, and returns the reply: a string for a simple or bulk string, an
// int64 for an integer, nil for a null, a []any for an array, and a
// [ReplyError] as the error for an error reply. It is meant for the
// administration commands of the helpers and their tests (CLUSTER, SENTINEL,
// INFO, WAIT), so that nothing they send passes through a watched client.
func Do(addr string, args ...string) (any, error) {
	return DoTimeoutAt(addr, DoTimeout, args...)
}

// DoTimeoutAt is [Do] with its own bound.
func DoTimeoutAt(addr string, timeout time.Duration, args ...string) (any, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(c))
}

// DoString is [Do] for commands that answer a string (INFO, CLUSTER NODES).
func DoString(addr string, args ...string) (string, error) {
	r, err := Do(addr, args...)
	if err != nil {
		return "", err
	}
	s, ok := r.(string)
	if !ok {
		return "", fmt.Errorf("%s: reply %v (%T), want a string", strings.Join(args, " "), r, r)
	}
	return s, nil
}

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, ReplyError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("bad bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("bad array length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			v, err := readReply(r)
			var re ReplyError
			if err != nil && !errors.As(err, &re) {
				return nil, err
			}
			if err != nil {
				v = re
			}
			out[i] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown reply type %q", line)
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return v
		}
	}
	return ""
}

// InfoField sends INFO section to addr and returns one of its fields, or
// "" when it is absent.
func InfoField(addr, section, field string) (string, error) {
	info, err := DoString(addr, "INFO", section)
	if err != nil {
		return "", err
	}
	return infoField(info, field), nil
}
