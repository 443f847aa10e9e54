# Thin wrapper over CMake; scripts/ hold the README's two commands.
.PHONY: all test demo install clean
all:
	cmake -S . -B build >/dev/null && cmake --build build -j$$(nproc)
test:
	scripts/test.sh
demo:
	scripts/demo.sh
install: all
	cmake --install build
clean:
	rm -rf build build-ci
