# A module shipping .terraform-version (and .opentofu-version): the version file's
# token picks the version when the spec names none.
resource "terraform_data" "x" {
  input = "versionfile"
}
