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

// hiddenJS is true when the element with id is not shown.
func hiddenJS(id string) string {
	return `(document.getElementById("` + id + `")?.offsetParent ?? null) === null`
}

// shownJS is true when the element with id is shown.
func shownJS(id string) string {
	return `(document.getElementById("` + id + `")?.offsetParent ?? null) !== null`
}

// TestWebPageIdentity (issue 32): the page says who it is connected as
// (the initialize result's identity) and hides what the role may not do:
// a viewer sees "vera (viewer)", no New, and on a terminal shared with
// her no Share…, Upload… or Files…; a user may share her own terminal
// but not one she was only shared (Share… hidden there, Upload… shown).
func TestWebPageIdentity(t *testing.T) {
	chromiumPath(t)
	s := startServerRoles(t, "")
	const uri = "ahp-terminal:/olgas"
	olga := s.dialMC(t, "ahp", olgaTok, "o1")
	olga.mustCall("createTerminal", map[string]any{"channel": uri})
	olga.mustCall("terminal/share", map[string]any{"channel": uri, "with": map[string]any{"principal": "vera"}, "access": "read"})
	olga.mustCall("terminal/share", map[string]any{"channel": uri, "with": map[string]any{"principal": "bob"}, "access": "write"})

	t.Run("viewer", func(t *testing.T) {
		b := newBrowser(t)
		b.login(pageURL(s, "websocket"), veraTok)
		b.poll("connected", `document.getElementById("status").textContent === "connected (WebSocket)"`, waitTimeout)
		b.poll("the page says vera (viewer)", shownJS("identity")+` && document.getElementById("identity").textContent === "vera (viewer)" && sidecarPage.identity()?.role === "viewer"`, waitTimeout)
		b.poll("no New for a viewer", hiddenJS("new")+" && "+hiddenJS("new-tab")+" && "+hiddenJS("hint-new"), waitTimeout)
		b.poll("the shared terminal listed", `document.querySelectorAll("#terminals li .name").length === 1`, waitTimeout)
		b.must("open the terminal", chromedp.Click("#terminals li .name", chromedp.ByQuery))
		b.poll("the tools shown", shownJS("kill"), waitTimeout)
		b.poll("no Share…, Upload… or Files… for a viewer", hiddenJS("share-with")+" && "+hiddenJS("upload")+" && "+hiddenJS("files-open"), waitTimeout)
	})
	t.Run("user", func(t *testing.T) {
		b := newBrowser(t)
		b.login(pageURL(s, "websocket"), bobTok)
		b.poll("the page says bob (user)", `document.getElementById("identity").textContent === "bob (user)"`, waitTimeout)
		b.poll("New for a user", shownJS("new"), waitTimeout)
		b.poll("olga's terminal listed", `document.querySelectorAll("#terminals li .name").length === 1`, waitTimeout)
		b.must("open olga's terminal", chromedp.Click("#terminals li .name", chromedp.ByQuery))
		b.poll("on olga's terminal: no Share…, Upload… and Files… shown", shownJS("kill")+" && "+hiddenJS("share-with")+" && "+shownJS("upload")+" && "+shownJS("files-open"), waitTimeout)
		b.must("open a terminal of bob's", chromedp.Click("#new", chromedp.ByID))
		b.poll("on bob's own terminal: Share… shown", `document.querySelectorAll("#terminals li .name").length === 2 && `+shownJS("share-with"), waitTimeout)
	})
}
