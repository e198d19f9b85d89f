package zookeeper

import (
	"fmt"
	"strconv"
	"strings"
)

// Lock node names: "_c_<guid>-lock-<seq>", the protected names of Curator's
// InterProcessMutex and go-zookeeper's zk.Lock (guid: 32 hex digits here,
// a dashed UUID in Curator; the server appends a 10-digit sequence).
const (
	protectedPrefix = "_c_"
	lockMarker      = "lock-"
)

// escapeName maps a lock name to a single path segment: every byte but
// ASCII letters, digits, '-', '_', '.' and '~' becomes %XX (so '/', '%' and
// anything ZooKeeper rejects in a path cannot appear), and the segments "."
// and "..", which ZooKeeper rejects, become "%2E" and "%2E%2E". The mapping
// is injective: two names never share a segment.
func escapeName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	switch s := b.String(); s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	default:
		return s
	}
}

// lockDir returns the node under which name's lock nodes live.
func lockDir(prefix, name string) string {
	if prefix == "/" {
		return "/" + escapeName(name)
	}
	return prefix + "/" + escapeName(name)
}

// lockSeq parses the sequence suffix of a lock node name (whatever follows
// the last "lock-", all digits). ok is false for children that are not lock
// nodes; they are ignored.
func lockSeq(node string) (seq int64, ok bool) {
	i := strings.LastIndex(node, lockMarker)
	if i < 0 {
		return 0, false
	}
	s := node[i+len(lockMarker):]
	if s == "" {
		return 0, false
	}
	for j := 0; j < len(s); j++ {
		if s[j] < '0' || s[j] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// cleanPrefix checks a node prefix and returns it in canonical form: an
// absolute path without a trailing slash ("/" for the root), "" meaning
// DefaultPrefix.
func cleanPrefix(p string) (string, error) {
	if p == "" {
		return DefaultPrefix, nil
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	if p != "/" {
		p = strings.TrimRight(p, "/")
		if p == "" {
			p = "/"
		}
	}
	if p == "/" {
		return p, nil
	}
	for _, seg := range strings.Split(p[1:], "/") {
		switch seg {
		case "":
			return "", fmt.Errorf("prefix %q has an empty segment", p)
		case ".", "..":
			return "", fmt.Errorf("prefix %q has a %q segment, which ZooKeeper rejects", p, seg)
		}
		for _, r := range seg {
			if r == 0 || (r > 0 && r < 0x20) || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
				return "", fmt.Errorf("prefix %q contains %U, which ZooKeeper rejects in paths", p, r)
			}
		}
	}
	if p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/") {
		return "", fmt.Errorf("prefix %q is inside ZooKeeper's reserved /zookeeper tree", p)
	}
	return p, nil
}
