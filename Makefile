.PHONY: setup run test eval-quick
setup:
	bash scripts/setup.sh
run:
	bash scripts/run.sh
test:
	bash scripts/test.sh
eval-quick: setup
	HF_HUB_OFFLINE=1 .venv/bin/copilot eval exactness --quick && HF_HUB_OFFLINE=1 .venv/bin/copilot eval latency --quick
