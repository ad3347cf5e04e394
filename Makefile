# lua-resty-shmlock
CC      ?= cc
CFLAGS  ?= -O2 -g
WARN     = -Wall -Wextra -Werror -std=gnu11
PIC      = -fPIC -fvisibility=hidden
LIB      = libshmlock.so
SRCS     = $(wildcard src/*.c)
OBJS     = $(SRCS:src/%.c=build/%.o)
HDRS     = $(wildcard src/*.h)

.PHONY: all clean
all: $(LIB)

build/%.o: src/%.c $(HDRS)
	@mkdir -p build
	$(CC) $(CFLAGS) $(WARN) $(PIC) -c $< -o $@

$(LIB): $(OBJS)
	$(CC) $(CFLAGS) -shared -o $@ $(OBJS) $(LDFLAGS)

clean:
	rm -rf build build-asan $(LIB) libshmlock-asan.so
