package tests

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestWebPageViewerReadOnly (issue 32): the page signed in as a viewer,
// opening a terminal shared with her read-only, shows its output and
// says "read only"; what she types is never sent (the host logs no
// refusal of her input, and the shell never runs it).
func TestWebPageViewerReadOnly(t *testing.T) {
	chromiumPath(t)
	s := startServerRoles(t, "")
	const uri = "ahp-terminal:/olgas"
	olga := s.dialMC(t, "ahp", olgaTok, "o1")
	olga.mustCall("createTerminal", map[string]any{"channel": uri})
	olga.mustCall("subscribe", termCh("olgas"))
	olga.mustCall("terminal/share", map[string]any{"channel": uri, "with": map[string]any{"principal": "vera"}, "access": "read"})

	b := newBrowser(t)
	b.login(pageURL(s, "websocket"), veraTok)
	b.poll("connected", `document.getElementById("status").textContent === "connected (WebSocket)"`, waitTimeout)
	b.poll("the shared terminal listed", `document.querySelectorAll("#terminals li .name").length === 1`, waitTimeout)
	b.must("open the terminal", chromedp.Click("#terminals li .name", chromedp.ByQuery))
	b.poll("the page says read only", `(sidecarPage.share()?.notice ?? "").toLowerCase().includes("read only") && document.body.innerText.toLowerCase().includes("read only")`, waitTimeout)

	if r, _ := olga.dispatch(uri, inputAction("echo from-$((6*7))-olga\r")); r != "" {
		t.Fatalf("olga's input rejected: %s", r)
	}
	b.poll("olga's output on vera's page", screenHas("from-42-olga"), waitTimeout)
	b.typeText("echo vera-$((6*7))\r")
	// Whatever the page sent went before this: olga's marker comes after.
	if r, _ := olga.dispatch(uri, inputAction("echo marker-$((6*7))\r")); r != "" {
		t.Fatalf("olga's input rejected: %s", r)
	}
	olga.waitOutput(uri, "marker-42")
	b.poll("olga's marker on vera's page", screenHas("marker-42"), waitTimeout)
	var screen string
	if err := b.eval(`sidecarPage.screen()`, &screen); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(screen, "vera-42") || strings.Contains(screen, "echo vera") {
		t.Errorf("vera's typing reached the shell:\n%s", screen)
	}
	if log := s.p.stderr.String(); strings.Contains(log, `"permission":"terminal.input","principal":"vera"`) {
		t.Error("the page sent vera's keystrokes (the host refused them)")
	}
}
