// SPDX-License-Identifier: MIT
/* What the tests read of a key through local_info() (key_fixture.h). */
#include <stdlib.h>

#include "harness.h"
#include "key_fixture.h"

struct local_key_info *info_of(local_session *s, const char *key)
{
	static LOCAL_OPTS(local_key_info, info);

	CHECK_OK(local_info(s, key, &info));
	return &info;
}

/* The info first, so that its address is the allocation's. */
struct info_with_value {
	struct local_key_info ki;
	char value[LOCAL_VALUE_MAX];
};

struct local_key_info *new_info(void)
{
	struct info_with_value *b = calloc(1, sizeof(*b));

	CHECK(b);
	b->ki.sz = sizeof(b->ki);
	b->ki.value_buf = b->value;
	b->ki.value_buf_size = sizeof(b->value);
	return &b->ki;
}
