# sidecar: build, test and install.  `make help` lists the targets.

GO      ?= go
BIN     ?= bin/sidecar
PREFIX  ?= /usr/local
DESTDIR ?=
ARGS    ?=
NPM     ?= npm
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

CONFDIR := $(DESTDIR)/etc/sidecar
UNITDIR := $(DESTDIR)/etc/systemd/system

.PHONY: all build run test interop-deps web web-deps web-test bench lint install clean help image

all: build

help:
	@echo "build    compile $(BIN) (version $(VERSION))"
	@echo "run      build, then ./$(BIN) serve \$$(ARGS)   e.g. make run ARGS='--config config.hcl'"
	@echo "test     go test -race on every package, end-to-end and interop tests included"
	@echo "         (first runs npm ci in tests/interop if node_modules is missing or stale)"
	@echo "web      rebuild the web page (web/ui -> web/dist, committed) from package-lock.json"
	@echo "web-test type-check the page, run its unit tests, check web/dist is up to date"
	@echo "bench    run every benchmark"
	@echo "lint     gofmt, go vet and staticcheck (go tool staticcheck: the version pinned in go.mod)"
	@echo "install  install binary, systemd unit and (if absent) /etc/sidecar/config.hcl"
	@echo "image    build the OCI image \$$(IMAGE) (FROM scratch: static binary, busybox-static,"
	@echo "         CA certificates; podman build, nothing pulled; see Containerfile)"
	@echo "clean    remove bin/"

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/sidecar

# The OCI image (Containerfile): FROM scratch, so nothing is pulled. Needs
# Debian's podman (or buildah: PODMAN=buildah), busybox-static and
# ca-certificates. The context is laid out in $(IMAGE_DIR).
IMAGE     ?= localhost/sidecar:$(VERSION)
IMAGE_DIR ?= bin/image
PODMAN    ?= podman

image:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(IMAGE_DIR)/sidecar ./cmd/sidecar
	deploy/image/rootfs.sh $(IMAGE_DIR) $(IMAGE_DIR)/sidecar
	$(PODMAN) build --pull=never -f $(IMAGE_DIR)/Containerfile -t $(IMAGE) $(IMAGE_DIR)
	@echo "built $(IMAGE)"

run: build
	./$(BIN) serve $(ARGS)

# tests/ starts the real binary; those tests build it themselves. The
# browser tests (tests/web_test.go) need /usr/bin/chromium and skip without.
test: interop-deps web-test
	$(GO) test -race -count=1 -timeout 12m ./...

# The Node interop tests (tests/interop) skip themselves without node_modules, so install
# them first. npm ci writes node_modules/.package-lock.json: while it is newer than
# package-lock.json nothing is reinstalled.
INTEROP       := tests/interop
INTEROP_STAMP := $(INTEROP)/node_modules/.package-lock.json

ifneq ($(shell command -v $(NPM) 2>/dev/null),)
interop-deps: $(INTEROP_STAMP)

$(INTEROP_STAMP): $(INTEROP)/package-lock.json
	cd $(INTEROP) && $(NPM) ci --no-audit --no-fund --engine-strict=false
	@touch $@
else
interop-deps:
	@echo "npm not found: the interop tests in tests/interop will be skipped"
endif

# The web page: TypeScript in web/ui, built by esbuild into web/dist, which
# is committed (go build embeds it and needs no npm). npm ci installs exactly
# what web/ui/package-lock.json pins, so the build is reproducible.
WEBUI       := web/ui
WEBUI_STAMP := $(WEBUI)/node_modules/.package-lock.json

ifneq ($(shell command -v $(NPM) 2>/dev/null),)
web-deps: $(WEBUI_STAMP)

$(WEBUI_STAMP): $(WEBUI)/package-lock.json
	cd $(WEBUI) && $(NPM) ci --no-audit --no-fund
	@touch $@

web: web-deps
	cd $(WEBUI) && node build.mjs

web-test: web-deps
	cd $(WEBUI) && ./node_modules/.bin/tsc --noEmit -p . && npm test --silent && node build.mjs --check
else
web-deps web web-test:
	@echo "npm not found: the web page's unit tests are skipped (web/dist is used as committed)"
endif

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# staticcheck is a tool dependency (go.mod: tool honnef.co/go/tools/cmd/staticcheck, pinned by
# its require line): go tool builds it from the module cache, so a clean clone needs only Go.
# Upgrade with: go get -tool honnef.co/go/tools/cmd/staticcheck@VERSION
lint:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

# The config is installed only when absent, so an upgrade never overwrites local edits.
install: build
	install -D -m0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/sidecar
	install -D -m0644 systemd/sidecar.service $(UNITDIR)/sidecar.service
	install -d -m0755 $(CONFDIR)
	@if [ -e $(CONFDIR)/config.hcl ]; then \
		echo "keeping existing $(CONFDIR)/config.hcl"; \
	else \
		echo "install -m0640 config.hcl $(CONFDIR)/config.hcl"; \
		install -m0640 config.hcl $(CONFDIR)/config.hcl; \
	fi
	@echo
	@echo "Installed. Optionally put SIDECAR_TOKEN in /etc/sidecar/sidecar.env (see systemd/sidecar.env.example), then:"
	@echo "  systemctl daemon-reload && systemctl enable --now sidecar"

clean:
	rm -rf bin
