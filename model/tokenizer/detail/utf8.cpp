// UTF-8 validation and the lossy (U+FFFD) decoder shared by batch and streaming decode.
#include "model/tokenizer/detail/utf8.hpp"

#include <cstring>

namespace di::tok::detail {

namespace {

constexpr std::string_view k_replacement = "\xEF\xBF\xBD";

// Length of the valid sequence at `p` (1..4), or 0 if the bytes there are not valid UTF-8.
int valid_sequence_length(const unsigned char* p, const unsigned char* end) {
  unsigned char b = p[0];
  auto cont = [&](int i, unsigned char lo, unsigned char hi) {
    return p + i < end && p[i] >= lo && p[i] <= hi;
  };
  if (b >= 0xC2 && b <= 0xDF) return cont(1, 0x80, 0xBF) ? 2 : 0;
  if (b >= 0xE0 && b <= 0xEF) {
    unsigned char lo = b == 0xE0 ? 0xA0 : 0x80;
    unsigned char hi = b == 0xED ? 0x9F : 0xBF;
    return cont(1, lo, hi) && cont(2, 0x80, 0xBF) ? 3 : 0;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    unsigned char lo = b == 0xF0 ? 0x90 : 0x80;
    unsigned char hi = b == 0xF4 ? 0x8F : 0xBF;
    return cont(1, lo, hi) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

}  // namespace

std::size_t find_invalid_utf8(std::string_view text) {
  const auto* begin = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = begin + text.size();
  const auto* p = begin;
  while (p < end) {
    // Skip ASCII eight bytes at a time: the common case for code and English prose.
    while (end - p >= 8) {
      std::uint64_t word;
      std::memcpy(&word, p, 8);
      if (word & 0x8080808080808080ull) break;
      p += 8;
    }
    if (p >= end) break;
    if (*p < 0x80) {
      ++p;
      continue;
    }
    int len = valid_sequence_length(p, end);
    if (len == 0) return std::size_t(p - begin);
    p += len;
  }
  return text.size();
}

void utf8_lossy_decoder::reset_sequence() {
  num_pending_ = 0;
  num_needed_ = 0;
  lower_ = 0x80;
  upper_ = 0xBF;
}

void utf8_lossy_decoder::feed_byte(unsigned char b, std::string& out) {
  if (num_needed_ > 0) {
    if (b >= lower_ && b <= upper_) {
      pending_[num_pending_++] = b;
      lower_ = 0x80;
      upper_ = 0xBF;
      if (--num_needed_ == 0) {
        out.append(reinterpret_cast<const char*>(pending_), std::size_t(num_pending_));
        reset_sequence();
      }
      return;
    }
    // The held prefix can never complete: it is one maximal invalid subpart. `b` starts anew.
    out.append(k_replacement);
    reset_sequence();
  }
  if (b < 0x80) {
    out.push_back(char(b));
  } else if (b >= 0xC2 && b <= 0xDF) {
    num_needed_ = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    num_needed_ = 2;
    lower_ = b == 0xE0 ? 0xA0 : 0x80;
    upper_ = b == 0xED ? 0x9F : 0xBF;
  } else if (b >= 0xF0 && b <= 0xF4) {
    num_needed_ = 3;
    lower_ = b == 0xF0 ? 0x90 : 0x80;
    upper_ = b == 0xF4 ? 0x8F : 0xBF;
  } else {
    out.append(k_replacement);
    return;
  }
  if (num_needed_ > 0) pending_[num_pending_++] = b;
}

void utf8_lossy_decoder::feed(std::string_view bytes, std::string& out) {
  std::size_t i = 0;
  // Fast path: with nothing held back, copy the valid prefix in one go.
  if (num_pending_ == 0) {
    std::size_t valid = find_invalid_utf8(bytes);
    out.append(bytes.data(), valid);
    i = valid;
  }
  for (; i < bytes.size(); ++i) feed_byte(static_cast<unsigned char>(bytes[i]), out);
}

void utf8_lossy_decoder::finish(std::string& out) {
  if (num_pending_ > 0) out.append(k_replacement);
  reset_sequence();
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  if (find_invalid_utf8(bytes) == bytes.size()) return std::string(bytes);
  out.reserve(bytes.size() + 8);
  utf8_lossy_decoder decoder;
  decoder.feed(bytes, out);
  decoder.finish(out);
  return out;
}

}  // namespace di::tok::detail
