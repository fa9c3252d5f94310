package tests

import (
	"strconv"
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

// TestWebPageShareRevoked (issue 32): when the owner revokes the share
// (sidecar share --revoke) of a terminal a viewer's page is attached to,
// the host's channel/ended reaches the page: the pane shows the host's
// reason and stops. What she types then is never sent, and the page
// does not attach again (the host logs no refusal of hers), while the
// page goes on working: a terminal shared with her later opens.
func TestWebPageShareRevoked(t *testing.T) {
	chromiumPath(t)
	s := startServerRoles(t, "")
	const uri = "ahp-terminal:/olgas"
	olga := s.dialMC(t, "ahp", olgaTok, "o1")
	olga.mustCall("createTerminal", map[string]any{"channel": uri})
	olga.mustCall("subscribe", termCh("olgas"))
	share := func(args ...string) {
		t.Helper()
		args = append([]string{"share", s.url}, args...)
		if out, errOut, code := s.run(t, append(args, "--token", olgaTok, "--cert-hash", s.hash)...); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	share("olgas", "--with", "vera", "--read-only")

	b := newBrowser(t)
	b.login(pageURL(s, "websocket"), veraTok)
	b.poll("the shared terminal listed", `document.querySelectorAll("#terminals li .name").length === 1`, waitTimeout)
	b.must("open the terminal", chromedp.Click("#terminals li .name", chromedp.ByQuery))
	if r, _ := olga.dispatch(uri, inputAction("echo before-$((6*7))\r")); r != "" {
		t.Fatalf("olga's input rejected: %s", r)
	}
	b.poll("olga's output on vera's page", screenHas("before-42"), waitTimeout)

	share("olgas", "--with", "vera", "--revoke")
	reason := "permission denied: terminal.attach: " + uri + " is no longer shared with vera (viewer): the share was revoked"
	b.poll("the pane says the share was revoked", `(() => { const t = sidecarPage.tabs()[0]; return t.ended && t.message === `+strconv.Quote(reason)+` && document.getElementById("exit").textContent === `+strconv.Quote(reason)+`; })()`, waitTimeout)
	b.poll("no read-only notice or Take over on an ended pane", hiddenJS("share")+" && document.getElementById(\"kill\").disabled", waitTimeout)

	b.typeText("echo vera-$((6*7))\r")
	if r, _ := olga.dispatch(uri, inputAction("echo after-$((6*7))\r")); r != "" {
		t.Fatalf("olga's input rejected: %s", r)
	}
	olga.waitOutput(uri, "after-42")

	// The page still works: a second terminal shared with vera opens.
	// Its subscribe goes after whatever the page sent before on the same
	// connection, so the log below has seen it. The catalogue lists only
	// that one to vera now: the first is no longer shared with her.
	const uri2 = "ahp-terminal:/olgas2"
	olga.mustCall("createTerminal", map[string]any{"channel": uri2})
	share("olgas2", "--with", "vera", "--read-only")
	b.poll("the second terminal listed, the first not", `document.querySelectorAll("#terminals li .name").length === 1`, waitTimeout)
	b.must("open the second terminal", chromedp.Click(`#terminals li .name`, chromedp.ByQuery))
	b.poll("the second terminal attached", `sidecarPage.tabs().length === 2 && sidecarPage.tabs()[1].uri === "`+uri2+`" && sidecarPage.tabs()[1].received > 0`, waitTimeout)

	var screen string
	if err := b.eval(`sidecarPage.tabs()[0].message`, &screen); err != nil {
		t.Fatal(err)
	}
	if screen != reason {
		t.Errorf("the ended pane's message changed to %q", screen)
	}
	// After the revoke the host refused the page nothing on the first
	// terminal: no input, no resize, no claim, no subscribe again.
	log := s.p.stderr.String()
	i := strings.Index(log, `"terminal share revoked"`)
	if i < 0 {
		t.Fatal("the host did not log the revoke")
	}
	for _, line := range strings.Split(log[i:], "\n") {
		if strings.Contains(line, `"permission.denied"`) && strings.Contains(line, `"principal":"vera"`) && strings.Contains(line, `"target":"`+uri+`"`) {
			t.Errorf("the page sent something after the share was revoked: %s", line)
		}
	}
}
