// Package logstream holds the live output of running actions: streams of
// bytes that workers write while an action runs and clients follow with
// ByteStream Read, named as the LogStream API
// (build.bazel.remote.logstream.v1) says: a read name
// "{instance}/logstreams/{id}" and a write name
// "{instance}/logstreams/{id}/{token}" that only writers know.
package logstream

import (
	"fmt"
	"strings"

	"github.com/gantry-build/gantry/internal/digest"
)

// segment is the resource name segment that marks a log stream.
const segment = "logstreams"

// maxPart bounds a stream id and a write token.
const maxPart = 128

// Name is a parsed log stream resource name.
type Name struct {
	// Instance is the instance name the stream belongs to ("" for the
	// default instance).
	Instance string
	// ID names the stream within its instance: "{task}.stdout" and
	// "{task}.stderr" for an action's output, "c{random}" for a stream a
	// client created (CreateLogStream).
	ID string
	// Token is the write token (write names only).
	Token string
}

// Read is the name readers pass to ByteStream Read.
func (n Name) Read() string {
	if n.Instance == "" {
		return segment + "/" + n.ID
	}
	return n.Instance + "/" + segment + "/" + n.ID
}

// Write is the name writers pass to ByteStream Write.
func (n Name) Write() string { return n.Read() + "/" + n.Token }

// Created reports whether the stream was made by CreateLogStream (rather
// than by a worker for an action's output, whose id ends in .stdout or
// .stderr).
func (n Name) Created() bool {
	_, action := taskOf(n.ID)
	return !action
}

// Streams of an action's output.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// ForTask names the stdout or stderr (which) stream of task's action.
func ForTask(instance, task, which string) Name {
	return Name{Instance: instance, ID: task + "." + which}
}

// Is reports whether resource is a log stream name, for read or for
// write (it may still be malformed: Parse says).
func Is(resource string) bool {
	parts := strings.Split(resource, "/")
	n := len(parts)
	return (n >= 2 && parts[n-2] == segment) || (n >= 3 && parts[n-3] == segment)
}

// ParseRead parses a read name, "{instance}/logstreams/{id}".
func ParseRead(resource string) (Name, error) {
	if n, err := parse(resource, false); err == nil || !IsWrite(resource) {
		return n, err
	}
	return Name{}, fmt.Errorf("%q is a log stream's write name: readers use its name, without the last segment (the write token)", resource)
}

// ParseWrite parses a write name, "{instance}/logstreams/{id}/{token}".
func ParseWrite(resource string) (Name, error) {
	if n, err := parse(resource, true); err == nil || !isRead(resource) {
		return n, err
	}
	return Name{}, fmt.Errorf("%q is a log stream's read name: writers use the write_resource_name CreateLogStream returned", resource)
}

// IsWrite reports whether resource has the shape of a write name.
func IsWrite(resource string) bool {
	parts := strings.Split(resource, "/")
	return len(parts) >= 3 && parts[len(parts)-3] == segment
}

func isRead(resource string) bool {
	parts := strings.Split(resource, "/")
	return len(parts) >= 2 && parts[len(parts)-2] == segment
}

func parse(resource string, write bool) (Name, error) {
	tail := 2
	if write {
		tail = 3
	}
	parts := strings.Split(resource, "/")
	if len(parts) < tail || parts[len(parts)-tail] != segment {
		form := "{instance}/logstreams/{id}"
		if write {
			form += "/{token}"
		}
		return Name{}, fmt.Errorf("%q is not a log stream name of the form %s", resource, form)
	}
	n := Name{Instance: strings.Join(parts[:len(parts)-tail], "/"), ID: parts[len(parts)-tail+1]}
	if write {
		n.Token = parts[len(parts)-1]
	}
	if len(parts) > tail && n.Instance == "" {
		return Name{}, fmt.Errorf("log stream %q starts with '/'; the default instance's streams start with %s/", resource, segment)
	}
	if err := digest.ValidateInstanceName(n.Instance); err != nil {
		return Name{}, fmt.Errorf("log stream %q: %w", resource, err)
	}
	if err := checkPart("stream id", n.ID); err != nil {
		return Name{}, fmt.Errorf("log stream %q: %w", resource, err)
	}
	if write {
		if err := checkPart("write token", n.Token); err != nil {
			return Name{}, fmt.Errorf("log stream %q: %w", resource, err)
		}
	}
	return n, nil
}

// checkPart allows 1 to maxPart letters, digits, '.', '_' and '-'.
func checkPart(what, s string) error {
	if s == "" || len(s) > maxPart {
		return fmt.Errorf("the %s must have 1 to %d characters", what, maxPart)
	}
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("the %s %q may only have letters, digits, '.', '_' and '-'", what, s)
		}
	}
	return nil
}
