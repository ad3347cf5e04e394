/*
 * token: owner tokens of locks, "<pid>:<start>:<serial>".
 *
 * pid and start (the process's start time in clock ticks since boot)
 * name the process even after its pid is reused; serial is 16 hex digits
 * of one counter in this library, shared by every Lua VM and thread of the
 * process, so that no two acquisitions on the host get the same token
 * however many VMs a process runs (nginx with lua_code_cache off, http and
 * stream Lua in one worker, an embedding host).  The counter starts at a
 * random value, so that two copies of the library loaded in one process
 * (from two paths) do not count the same serials.
 */

#ifndef TOKEN_H
#define TOKEN_H

#include <stddef.h>

#define TOKEN_MAX  64

/* Writes a fresh token to buf (TOKEN_MAX bytes); returns its length. */
size_t token_next(char *buf);

#endif /* TOKEN_H */
