# comm_nccl_ref_refusal(REF OURS OUT): why REF (a path to an nccl.h) cannot be the reference of the NCCL drop-in's
# ABI tests, or "" when it can. OURS is compat/nccl/nccl.h. The comparison proves something only against NVIDIA's
# own header: a header found on the search path could be ours (COMM_NCCL_REF_H pointing at compat/nccl, an
# installed or copied drop-in header), and comparing ours with ours always passes. So REF must not be, nor lie
# beside, compat/nccl/nccl.h (real paths), must not have its bytes, must not mention libcomm (a derivative of
# ours), and must carry NVIDIA's copyright line. Included by tests/CMakeLists.txt (at configure time) and by
# nccl_abi_protos.cmake (again when the test runs). tests/compat/test_nccl_abi.c checks the same in C.
# SPDX-License-Identifier: Apache-2.0
function(comm_nccl_ref_refusal ref ours out)
  set(why "")
  if(NOT EXISTS "${ref}")
    set(why "${ref} does not exist")
  else()
    get_filename_component(refReal "${ref}" REALPATH)
    get_filename_component(oursReal "${ours}" REALPATH)
    get_filename_component(oursDir "${oursReal}" DIRECTORY)
    get_filename_component(refDir "${refReal}" DIRECTORY)
    file(SHA256 "${refReal}" refSum)
    file(SHA256 "${oursReal}" oursSum)
    file(READ "${refReal}" text)
    if(refReal STREQUAL oursReal OR refDir STREQUAL oursDir)
      set(why "${ref} is libcomm's own header (${oursReal})")
    elseif(refSum STREQUAL oursSum)
      set(why "${ref} (${refReal}) is a copy of libcomm's own ${oursReal}")
    elseif(text MATCHES "libcomm")
      set(why "${ref} (${refReal}) mentions libcomm: a derivative of libcomm's compat/nccl/nccl.h, not NVIDIA's")
    elseif(NOT text MATCHES "Copyright \\(c\\) [0-9, -]*NVIDIA CORPORATION")
      set(why "${ref} (${refReal}) has no NVIDIA copyright line: not NVIDIA's nccl.h")
    endif()
  endif()
  set(${out} "${why}" PARENT_SCOPE)
endfunction()
