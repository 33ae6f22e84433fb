package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestKillThatSticksRefusesResubmission: a kill with a refusal fails
// new submissions of the same action (instance and digest) until it
// ends; other instances and actions, and a plain kill, are unaffected.
func TestKillThatSticksRefusesResubmission(t *testing.T) {
	s, clk := newTest(t)
	plain := submit(t, s, "plain")
	if _, err := s.Kill(plain, "plain kill", 0); err != nil {
		t.Fatal(err)
	}
	submit(t, s, "plain") // a plain kill only cancels

	stuck := submit(t, s, "stuck")
	if done, err := s.Kill(stuck, "runs forever", 30*time.Minute); err != nil || done {
		t.Fatalf("Kill = %v, %v", done, err)
	}
	resubmit := func(instance string) error {
		_, err := s.Submit(SubmitRequest{Instance: instance, ActionDigest: action("stuck")})
		return err
	}
	err := resubmit("main")
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("resubmitting the killed action: %v, want ErrRefused", err)
	}
	for _, want := range []string{"killed by an operator", "runs forever", stuck, "refused until", action("stuck").String()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if err := resubmit("other"); err != nil {
		t.Errorf("the same action in another instance: %v", err)
	}
	submit(t, s, "unrelated")

	// Killing the finished operation again lengthens the window.
	clk.Advance(20 * time.Minute)
	if done, err := s.Kill(stuck, "still stuck", 30*time.Minute); err != nil || !done {
		t.Fatalf("second Kill = %v, %v", done, err)
	}
	clk.Advance(29 * time.Minute)
	if err := resubmit("main"); !errors.Is(err, ErrRefused) {
		t.Fatalf("49 min after the first kill, 29 after the second: %v", err)
	}
	clk.Advance(time.Minute)
	if err := resubmit("main"); err != nil {
		t.Fatalf("after the refusal ended: %v", err)
	}
	if len(s.refused) != 0 {
		t.Errorf("%d refusals kept after they ended", len(s.refused))
	}
}
