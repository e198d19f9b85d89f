package pgtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Kill kills the server as a crash: SIGKILL to the postmaster and to every
// server process it started (backends, checkpointer, WAL writer, ...), and
// waits until they are gone. Its committed data stays: Restart starts it
// again, and PostgreSQL recovers from its WAL.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.cmd, c.paused = nil, false
	c.mu.Unlock()
	if cmd == nil {
		return nil
	}
	pid := cmd.Process.Pid
	// Stopped, the postmaster starts no process between the listing of
	// its children and the kill.
	if err := stopProcess(pid); err != nil {
		return err
	}
	kids := children(pid)
	_ = cmd.Process.Kill()
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	<-done
	// A new postmaster refuses the data directory while a process of the
	// old one still holds its shared memory.
	deadline := time.Now().Add(30 * time.Second)
	for _, k := range kids {
		for alive(k) {
			if time.Now().After(deadline) {
				return fmt.Errorf("pgtest: kill: server process %d still runs 30s after SIGKILL", k)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// Pause stops the postmaster and every server process with SIGSTOP:
// connections stay open and nothing is answered until Resume. Stop,
// Restart and Close continue a paused server first.
func (c *Cluster) Pause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return errors.New("pgtest: pause: server not running")
	}
	pid := c.cmd.Process.Pid
	if err := stopProcess(pid); err != nil {
		return err
	}
	c.paused = true
	for _, k := range children(pid) {
		_ = syscall.Kill(k, syscall.SIGSTOP)
	}
	return nil
}

// Resume continues a paused server with SIGCONT.
func (c *Cluster) Resume() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return errors.New("pgtest: resume: server not running")
	}
	c.paused = false
	return signalServer(c.cmd.Process.Pid, syscall.SIGCONT)
}

// signalServer sends sig to the postmaster pid and its children.
func signalServer(pid int, sig syscall.Signal) error {
	for _, k := range children(pid) {
		_ = syscall.Kill(k, sig)
	}
	return syscall.Kill(pid, sig)
}

// stopProcess sends SIGSTOP to pid and waits until it is stopped (a
// signal is delivered asynchronously).
func stopProcess(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pgtest: SIGSTOP %d: %w", pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _, ok := procStat(pid)
		if !ok || st == "T" || st == "t" || st == "Z" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: process %d not stopped 10s after SIGSTOP (state %s)", pid, st)
		}
		time.Sleep(time.Millisecond)
	}
}

// children lists the processes whose parent is pid (every server process
// is a child of the postmaster).
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		k, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, ok := procStat(k); ok && ppid == pid {
			out = append(out, k)
		}
	}
	return out
}

// alive says whether pid runs (a zombie has exited).
func alive(pid int) bool {
	st, _, ok := procStat(pid)
	return ok && st != "Z" && st != "X"
}

// procStat returns the state and parent of pid from /proc/pid/stat.
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0], ppid, err == nil
}
