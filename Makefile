# Two commands: `make serve` runs sandgate on its embedded defaults; `make test` runs the suite.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: serve test install bench clean

$(BIN)/sandgate: pyproject.toml
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null || \
		{ echo "sandgate needs Python 3.11 or newer (set PY=/path/to/python3.11)"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	# mitmproxy 11.0.x pins h11<=0.14 (CVE-2025-43859); install the fixed h11 over the pin.
	$(BIN)/pip install -q 'h11>=0.16,<0.17' 2>&1 | grep -v "dependency resolver\|h11<=0.14.0" || true
	$(BIN)/python -c "import h11; assert tuple(map(int, h11.__version__.split('.')[:2])) >= (0, 16), h11.__version__"
	touch $(BIN)/sandgate

install: $(BIN)/sandgate

serve: install
	$(BIN)/sandgate serve

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python tests/bench/egress.py

clean:
	rm -rf $(VENV)
