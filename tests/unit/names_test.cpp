// The Kubernetes name syntax dlbench checks before the API server would, and the text helpers.
#include <gtest/gtest.h>

#include "dlbench/core/names.hpp"

namespace dlbench {
namespace {

TEST(Names, QualifiedNamesAsLabelKeys) {
  EXPECT_TRUE(is_qualified_name("app"));
  EXPECT_TRUE(is_qualified_name("app.kubernetes.io/name"));
  EXPECT_TRUE(is_qualified_name("a_b.c-d"));
  EXPECT_TRUE(is_qualified_name(std::string(63, 'a')));
  EXPECT_FALSE(is_qualified_name(std::string(64, 'a')));
  EXPECT_FALSE(is_qualified_name(""));
  EXPECT_FALSE(is_qualified_name("/name"));
  EXPECT_FALSE(is_qualified_name("Example.com/name"));  // the prefix is a DNS subdomain: lower case
  EXPECT_FALSE(is_qualified_name("a b"));
  EXPECT_FALSE(is_qualified_name("-a"));
  EXPECT_FALSE(is_qualified_name("a/b/c"));
}

TEST(Names, ExtendedResources) {
  EXPECT_TRUE(is_extended_resource_name("nvidia.com/gpu"));
  EXPECT_TRUE(is_extended_resource_name("rdma/hca_shared_devices_a"));
  EXPECT_FALSE(is_extended_resource_name("gpu"));
  EXPECT_FALSE(is_extended_resource_name("kubernetes.io/gpu"));
  EXPECT_FALSE(is_extended_resource_name("node.kubernetes.io/gpu"));
  EXPECT_TRUE(is_extended_resource_name("kubernetes.iox/gpu"));
}

TEST(Names, LabelsDomainsAndEnvironmentVariables) {
  EXPECT_TRUE(is_label_value(""));
  EXPECT_TRUE(is_label_value("v1.2_3-a"));
  EXPECT_FALSE(is_label_value("a b"));
  EXPECT_FALSE(is_label_value(std::string(64, 'v')));
  EXPECT_TRUE(is_dns1123_subdomain("high-priority.team"));
  EXPECT_FALSE(is_dns1123_subdomain("high_priority"));
  EXPECT_FALSE(is_dns1123_subdomain("a..b"));
  EXPECT_TRUE(is_env_var_name("a.b-c_D9"));
  EXPECT_FALSE(is_env_var_name("9A"));
  EXPECT_FALSE(is_env_var_name("A=B"));
}

TEST(Names, Utf8AndPrintable) {
  std::size_t offset = 0;
  EXPECT_TRUE(is_valid_utf8("plain ✓ text"));
  EXPECT_FALSE(is_valid_utf8("ab\xff", &offset));
  EXPECT_EQ(offset, 2u);
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));      // overlong
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));  // a surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_EQ(printable("a\nb\x01\xff✓"), "a\\nb\\x01\\xff✓");
  EXPECT_EQ(printable(std::string(100, 'x'), 5), "xxxxx...");
}

}  // namespace
}  // namespace dlbench
