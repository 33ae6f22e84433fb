// Package cspwatch watches a page in Chromium, driven by chromedp, for
// what Gantry's status pages must never do: break their Content Security
// Policy (an inline script or style, a resource from elsewhere) or throw.
// The pages carry no scripts, so any of these is a bug a user would see
// as a page that does not quite work.
package cspwatch

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Watch collects the console of a chromedp tab: the browser's log, where
// Chromium reports a CSP violation (source "security"), uncaught
// exceptions, and the securitypolicyviolation events of every document
// (a listener the browser adds before the page's own content; the
// browser's injection is not subject to the page's CSP).
type Watch struct {
	mu       sync.Mutex
	msgs     []chromedp.ConsoleMessage
	barriers map[string]bool
	changed  chan struct{}
	seq      int
}

// barrierPrefix marks the console messages Check writes to know that
// every earlier message arrived.
const barrierPrefix = "gantry-cspwatch-barrier "

// listener reports each violation to the console, where Watch sees it.
const listener = `document.addEventListener('securitypolicyviolation', e => console.error('securitypolicyviolation: ' + e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline') + ' at ' + e.sourceFile + ':' + e.lineNumber), true);`

// Start watches the tab of ctx (a chromedp context whose browser runs)
// until ctx ends.
func Start(ctx context.Context) (*Watch, error) {
	w := &Watch{barriers: map[string]bool{}, changed: make(chan struct{}, 1)}
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: listener}); err != nil {
		return nil, fmt.Errorf("adding the securitypolicyviolation listener: %w", err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			w.mu.Lock()
			if strings.HasPrefix(m.Text, barrierPrefix) {
				w.barriers[strings.TrimPrefix(m.Text, barrierPrefix)] = true
			} else {
				w.msgs = append(w.msgs, m)
			}
			w.mu.Unlock()
			select {
			case w.changed <- struct{}{}:
			default:
			}
		}
	}()
	return w, nil
}

// Problem reports whether m is a CSP violation or an uncaught exception.
func Problem(m chromedp.ConsoleMessage) bool {
	return m.IsException() || m.Source == "security" ||
		strings.Contains(m.Text, "Content Security Policy") || strings.Contains(m.Text, "securitypolicyviolation")
}

// Check fails t if the pages shown since the last Check (what names
// them) reported a problem. It first writes a marker to the console and
// waits for it, so that every message of those pages has arrived.
func (w *Watch) Check(ctx context.Context, t testing.TB, what string) {
	t.Helper()
	w.mu.Lock()
	w.seq++
	id := fmt.Sprint(w.seq)
	w.mu.Unlock()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf("console.debug(%q), true", barrierPrefix+id))); err != nil {
		t.Fatalf("CSP check of %s: writing the console marker: %v", what, err)
	}
	for {
		w.mu.Lock()
		seen := w.barriers[id]
		var problems []string
		if seen {
			for _, m := range w.msgs {
				if Problem(m) {
					problems = append(problems, fmt.Sprintf("%s (%s %s:%d)", m, m.Source, m.URL, m.Line))
				}
			}
			w.msgs = nil
		}
		w.mu.Unlock()
		if seen {
			if len(problems) > 0 {
				t.Errorf("%s reported %d Content-Security-Policy violation(s) or exception(s):\n  %s", what, len(problems), strings.Join(problems, "\n  "))
			}
			return
		}
		select {
		case <-w.changed:
		case <-ctx.Done():
			t.Fatalf("CSP check of %s: the console marker never arrived: %v", what, ctx.Err())
		}
	}
}
