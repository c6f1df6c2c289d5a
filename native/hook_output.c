// Writing the hook's record file. See hook_output.h for the format.

#define _GNU_SOURCE
#include "hook_output.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define TL_MAX_CHUNK_PARTS 8

// writev until everything is written; |parts| is consumed.
static int tl_writev_all(int fd, struct iovec* parts, int count) {
  while (count > 0) {
    ssize_t written = writev(fd, parts, count);
    if (written < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    while (count > 0 && (size_t)written >= parts->iov_len) {
      written -= (ssize_t)parts->iov_len;
      ++parts;
      --count;
    }
    if (count > 0) {
      parts->iov_base = (char*)parts->iov_base + written;
      parts->iov_len -= (size_t)written;
    }
  }
  return 0;
}

int tl_output_create(const char* path) {
  // never through a link planted at the record's name (tracelink removes stale records first)
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return -1;
  static const char kMagic[8] = {'T', 'L', 'H', 'O', 'O', 'K', 0, 0};
  uint32_t version[2] = {TL_FORMAT_VERSION, 0};
  struct iovec parts[2] = {{(void*)kMagic, sizeof(kMagic)}, {version, sizeof(version)}};
  if (tl_writev_all(fd, parts, 2) != 0) {
    int error = errno;
    close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

int tl_output_chunk(int fd, tl_chunk_tag_t tag, const struct iovec* parts, int part_count) {
  if (fd < 0 || part_count > TL_MAX_CHUNK_PARTS) return -1;
  uint32_t header[2] = {(uint32_t)tag, 0};
  struct iovec all[1 + TL_MAX_CHUNK_PARTS];
  all[0].iov_base = header;
  all[0].iov_len = sizeof(header);
  size_t length = 0;
  for (int i = 0; i < part_count; ++i) {
    all[1 + i] = parts[i];
    length += parts[i].iov_len;
  }
  if (length > UINT32_MAX) return -1;
  header[1] = (uint32_t)length;
  return tl_writev_all(fd, all, 1 + part_count);
}
